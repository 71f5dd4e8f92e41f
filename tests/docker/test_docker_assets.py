"""docker/ checked by construction: no Docker engine runs here, so these tests are the linter of the compose file
and the Dockerfile (test_observability_assets.py checks Prometheus and Grafana). Fast, no network."""

from __future__ import annotations

import base64
import importlib.util
import re
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jsonschema
import yaml
from tests.docker.compose_model import (
    BARE_VARIABLE,
    DOCKER,
    INTERPOLATION,
    PROVIDER_OPTIONS,
    REPO,
    as_list,
    dockerfile_instructions,
    env_example,
    requirement_pins,
    stack_pins,
)

# --- compose -------------------------------------------------------------------------------------------------

SERVICE_KEYS = [
    "image",
    "build",
    "command",
    "entrypoint",
    "environment",
    "env_file",
    "healthcheck",
    "hostname",
    "ports",
    "restart",
    "volumes",
    "depends_on",
    "user",
    "working_dir",
    "networks",
    "deploy",
    "profiles",
    "expose",
    "labels",
    "container_name",
    "init",
    "stop_grace_period",
    "ulimits",
    "logging",
    "pull_policy",
    "shm_size",
    "tmpfs",
    "cap_add",
    "cap_drop",
    "secrets",
    "configs",
    "extra_hosts",
]
STRING_OR_LIST = {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}
COMPOSE_SCHEMA: dict[str, Any] = {  # the subset of the compose specification this file uses, strictly
    "type": "object",
    "required": ["services"],
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z0-9][a-z0-9_-]*$"},
        "services": {"type": "object", "additionalProperties": {"$ref": "#/$defs/service"}},
        "volumes": {"type": "object", "additionalProperties": {"type": ["object", "null"]}},
    },
    "patternProperties": {"^x-": {}},
    "additionalProperties": False,
    "$defs": {
        "service": {
            "type": "object",
            "required": ["image"],
            "properties": {
                "image": {"type": "string"},
                "build": {
                    "type": "object",
                    "properties": {"context": {"type": "string"}, "dockerfile": {"type": "string"}},
                    "additionalProperties": False,
                },
                "command": STRING_OR_LIST,
                "entrypoint": STRING_OR_LIST,
                "hostname": {"type": "string"},
                "restart": {"enum": ["no", "always", "on-failure", "unless-stopped"]},
                "environment": {
                    "type": "object",
                    "additionalProperties": {"type": ["string", "number", "boolean", "null"]},
                },
                "ports": {"type": "array", "items": {"type": "string", "pattern": r"^\d+:\d+$"}},
                "volumes": {"type": "array", "items": {"type": "string", "pattern": r"^[^:]+:/[^:]*(:ro)?$"}},
                "depends_on": {
                    "type": "object",
                    "additionalProperties": {
                        "type": "object",
                        "properties": {
                            "condition": {
                                "enum": ["service_started", "service_healthy", "service_completed_successfully"]
                            }
                        },
                        "required": ["condition"],
                        "additionalProperties": False,
                    },
                },
                "deploy": {
                    "type": "object",
                    "required": ["resources"],
                    "properties": {
                        "resources": {
                            "type": "object",
                            "required": ["limits"],
                            "properties": {
                                "limits": {
                                    "type": "object",
                                    "required": ["memory", "cpus"],
                                    "properties": {
                                        "memory": {"type": "string", "pattern": r"^\d+[kmg]$"},
                                        "cpus": {"type": "number", "exclusiveMinimum": 0},
                                    },
                                    "additionalProperties": False,
                                }
                            },
                            "additionalProperties": False,
                        }
                    },
                    "additionalProperties": False,
                },
                "healthcheck": {
                    "type": "object",
                    "required": ["test"],
                    "properties": {
                        "test": {"type": "array", "items": {"type": "string"}, "minItems": 2},
                        "interval": {"type": "string", "pattern": r"^\d+[smh]$"},
                        "timeout": {"type": "string", "pattern": r"^\d+[smh]$"},
                        "start_period": {"type": "string", "pattern": r"^\d+[smh]$"},
                        "retries": {"type": "integer", "minimum": 1},
                    },
                    "additionalProperties": False,
                },
            },
            "propertyNames": {"enum": SERVICE_KEYS},
        }
    },
}


def test_compose_matches_the_schema(compose: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator.check_schema(COMPOSE_SCHEMA)
    errors = [
        f"{'/'.join(map(str, e.path))}: {e.message}"
        for e in jsonschema.Draft202012Validator(COMPOSE_SCHEMA).iter_errors(compose)
    ]
    assert errors == []


def test_compose_has_the_stack_the_issue_asks_for(services: dict[str, dict[str, Any]]) -> None:
    commands = {name: " ".join(as_list(s.get("command"))) for name, s in services.items()}
    for airflow_part in ("api-server", "scheduler", "dag-processor", "triggerer"):
        assert [n for n, c in commands.items() if c == airflow_part], airflow_part
    kafka = [n for n, s in services.items() if s["image"].startswith("apache/kafka:")]
    assert len(kafka) == 2 and {services[k]["image"] for k in kafka} == {"apache/kafka:4.3.1"}
    assert any("deploy.master.Master" in c for c in commands.values())
    assert any("deploy.worker.Worker spark://spark-master:7077" in c for c in commands.values())
    # An uncapped application must not take the whole shared master (flows' copies cap their own cores).
    assert "-Dspark.deploy.defaultCores=" in services["spark-master"]["environment"]["SPARK_MASTER_OPTS"]
    assert "mirrorflow metrics serve" in commands["metrics"]
    for name, service in services.items():
        env = service.get("environment", {})
        if env.get("AIRFLOW__CORE__EXECUTOR") is not None:
            assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor", name
            assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg2://"), name


def test_compose_variables_all_come_from_the_env_example(compose_text: str) -> None:
    documented = env_example()
    used = {m.group(1): m.group(2) for m in INTERPOLATION.finditer(compose_text.replace("$$", ""))}
    assert BARE_VARIABLE.findall(compose_text.replace("$$", "")) == [], "use ${VAR} (or $$ for the container's shell)"
    assert sorted(set(used) - set(documented)) == [], "used in compose.yaml, missing from .env.example"
    assert sorted(set(documented) - set(used)) == [], "in .env.example, unused by compose.yaml"
    no_default = sorted(name for name, op in used.items() if op is None)
    assert no_default == [], "a variable without a default (:-) or an explicit error (:?)"


def test_compose_references_resolve(services: dict[str, dict[str, Any]], compose: dict[str, Any]) -> None:
    for name, service in services.items():
        for dep, spec in service.get("depends_on", {}).items():
            assert dep in services and dep != name, f"{name} depends on {dep}"
            if spec["condition"] == "service_healthy":
                assert "healthcheck" in services[dep], f"{name} waits for {dep} to be healthy; it has no healthcheck"
            if spec["condition"] == "service_completed_successfully":
                assert services[dep].get("restart") == "no", f"{dep} must run once"
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (DOCKER / source).exists(), f"{name}: {source} does not exist"
            else:
                assert source in compose["volumes"], f"{name}: volume {source} is not declared"
        if "build" in service:
            context = (DOCKER / service["build"]["context"]).resolve()
            assert (context / service["build"]["dockerfile"]).is_file()
    host_ports = [p.split(":")[0] for s in services.values() for p in s.get("ports", [])]
    assert len(host_ports) == len(set(host_ports)), f"a host port is published twice: {sorted(host_ports)}"
    hostnames = [s["hostname"] for s in services.values() if "hostname" in s]
    assert all(h in services for h in hostnames), "a hostname other than its service name is not resolvable"


def test_compose_images_are_pinned(services: dict[str, dict[str, Any]]) -> None:
    version = re.search(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M)
    assert version is not None
    for name, service in services.items():
        repository, _, tag = service["image"].rpartition(":")
        assert repository and re.fullmatch(r"v?\d+(\.\d+)+(-[a-z0-9]+)?", tag), f"{name}: {service['image']}"
        if "build" in service:
            assert tag == version.group(1), f"{name}: the built image is tagged with Mirrorflow's version"


def test_airflow_settings_exist_in_airflow(services: dict[str, dict[str, Any]]) -> None:
    spec = importlib.util.find_spec("airflow")
    assert spec is not None and spec.origin is not None
    template = yaml.safe_load((Path(spec.origin).parent / "config_templates" / "config.yml").read_text())
    names = {k for s in services.values() for k in s.get("environment", {}) if k.startswith("AIRFLOW__")}
    names |= set(re.findall(r"(AIRFLOW__\w+)=", (DOCKER / "Dockerfile").read_text()))
    assert len(names) > 10
    providers: dict[str, set[str]] = {}
    for requirement, sections in PROVIDER_OPTIONS.items():
        name, _, version = requirement.partition("==")
        assert stack_pins().get(name) == version, f"{requirement}: re-record its options for the pinned version"
        for section, options in sections.items():
            providers.setdefault(section, set()).update(options)
    for name in sorted(names):
        section, key = name.removeprefix("AIRFLOW__").lower().split("__", 1)
        known = set(template.get(section, {}).get("options", {})) | providers.get(section, set())
        assert key in known, f"{name}: neither Airflow 3.3 nor a pinned provider has [{section}] {key}"


def test_kafka_clusters_are_valid_kraft_nodes(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        if not service["image"].startswith("apache/kafka:"):
            continue
        env = service["environment"]
        raw = base64.urlsafe_b64decode(env["CLUSTER_ID"] + "==")
        assert len(env["CLUSTER_ID"]) == 22 and len(raw) == 16, f"{name}: CLUSTER_ID is not a Kafka Uuid"
        assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"].startswith(f"{env['KAFKA_NODE_ID']}@")
        listeners = {item.split("://")[0] for item in env["KAFKA_LISTENERS"].split(",")}
        protocols = dict(item.split(":") for item in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
        advertised = {
            item.split("://")[0]: item.split("://")[1] for item in env["KAFKA_ADVERTISED_LISTENERS"].split(",")
        }
        assert listeners == set(protocols) and set(advertised) <= listeners
        assert env["KAFKA_CONTROLLER_LISTENER_NAMES"] in listeners - set(advertised)
        assert advertised[env["KAFKA_INTER_BROKER_LISTENER_NAME"]] == f"{name}:9092"
        assert "healthcheck" in service


def test_the_compose_config_loads_and_points_at_the_compose_clusters(services: dict[str, dict[str, Any]]) -> None:
    from mirrorflow.config.loader import load_config

    scheduler = services["airflow-scheduler"]
    env = {k: str(v) for k, v in scheduler["environment"].items()}
    mount = next(v for v in scheduler["volumes"] if v.split(":")[1] == "/etc/mirrorflow")
    config_dir = DOCKER / mount.split(":")[0]
    config = load_config(config_dir / Path(env["MIRRORFLOW_CONFIG"]).name, environ=env)
    assert [f.name for f in config.flows] == ["primary->backup"]
    for flow in config.flows:
        for alias in (flow.source, flow.target):
            host, port = env[f"MIRRORFLOW_{alias.upper()}_BOOTSTRAP"].split(":")
            assert host in services and port == "9092"


def test_airflow_init_creates_the_spark_connection_the_workers_serve(services: dict[str, dict[str, Any]]) -> None:
    from mirrorflow.airflow.spark import connection_master

    script = DOCKER / "airflow-init.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    init = services["airflow-init"]
    assert init["command"] == ["bash", "/opt/mirrorflow/docker/airflow-init.sh"]
    url = init["environment"]["SPARK_MASTER_URL"]
    host, port = url.rsplit(":", 1)  # what the script passes to `airflow connections add`
    assert connection_master(SimpleNamespace(conn_type="spark", host=host, port=int(port))) == url
    master = as_list(services["spark-master"]["command"])
    assert url == f"spark://{master[master.index('--host') + 1]}:{master[master.index('--port') + 1]}"
    assert "airflow db migrate" in script.read_text()


# --- Dockerfile ----------------------------------------------------------------------------------------------


def test_dockerfile_bases_are_pinned_and_versions_match_requirements() -> None:
    pins = requirement_pins()
    args: dict[str, str] = {}
    froms = []
    for op, rest in dockerfile_instructions():
        if op == "ARG" and "=" in rest:
            key, value = rest.split("=", 1)
            args[key] = value
        if op == "FROM":
            froms.append(re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], rest.split()[0]))
    assert args["AIRFLOW_VERSION"] == pins["apache-airflow"]
    assert args["PYSPARK_VERSION"] == pins["pyspark"]
    assert args["TEMURIN_TAG"].startswith("17."), "Spark and the brokers are tested on Java 17"
    assert len(froms) == 2
    for image in froms:
        repository, _, tag = image.rpartition(":")
        assert repository and "latest" not in tag and re.search(r"\d+\.\d+", tag), image
    assert froms[-1] == f"apache/airflow:slim-{pins['apache-airflow']}-python3.11"


def test_dockerfile_runs_as_a_user_and_installs_pinned_packages() -> None:
    instructions = dockerfile_instructions()
    users = [rest for op, rest in instructions if op == "USER"]
    assert users and users[-1] not in ("root", "0"), "the image must end on a non-root USER"
    assert not any(op == "ADD" for op, _ in instructions), "COPY only (ADD fetches URLs and unpacks archives)"
    runs = " && ".join(rest for op, rest in instructions if op == "RUN")
    installs = [cmd.strip() for cmd in re.split(r"&&|;", runs) if re.search(r"\bpip install\b", cmd)]
    assert installs == [
        "pip install -r requirements.txt -r docker/requirements.txt",
        'pip install --force-reinstall --no-deps "pyspark==${PYSPARK_VERSION}"',  # the pyspark-client trap
        "pip install --no-deps -e .",
    ]
    copied = [rest.split()[-2] for op, rest in instructions if op == "COPY" and "--from" not in rest]
    for source in copied:
        assert (REPO / source).exists(), f"COPY {source}: not in the checkout"
    ignore = (DOCKER / "Dockerfile.dockerignore").read_text().splitlines()
    for source in {s for op, rest in instructions if op == "COPY" and "--from" not in rest for s in rest.split()[1:-1]}:
        if not source.startswith("--"):
            assert f"!{source}" in ignore or f"!{source}/" in ignore, f"{source} is excluded from the build context"
