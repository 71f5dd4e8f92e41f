"""The production-shaped compose stack (issue 22), checked by construction like test_docker_assets.py (no Docker
engine runs here): Celery workers per queue with the copy on `spark`, the FAB auth manager, a health check and
resource limits on every long-running service, the packed executor env in the image, and Spark's monitoring
(History Server on the drivers' event log, Prometheus endpoints). Names are checked against the real things
where they are installed: Airflow's config template and CLI, Spark's jar, Mirrorflow's CLI and config loader."""

from __future__ import annotations

import functools
import glob
import os
import re
import subprocess
import zipfile
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml
from tests.docker.compose_model import (
    DOCKER,
    REPO,
    as_list,
    dockerfile_instructions,
    env_example,
    stack_pins,
)

FAB_AUTH_MANAGER = "airflow.providers.fab.auth_manager.fab_auth_manager.FabAuthManager"
CELERY_APP = "airflow.providers.celery.executors.celery_executor.app"
HISTORY_SERVER = "org.apache.spark.deploy.history.HistoryServer"
HISTORY_UI_PORT = 18080  # spark.history.ui.port's default (spark-defaults.conf may set another)
GIB = 1 << 30
# Instances of Spark's metrics system (docs: monitoring, "Metrics"): `*` is every one of them.
METRICS_INSTANCES = {"*", "master", "worker", "driver", "executor", "applications", "shuffleService"}


def airflow_template() -> dict[str, Any]:
    import airflow

    path = Path(airflow.__file__).parent / "config_templates" / "config.yml"
    return yaml.safe_load(path.read_text())  # type: ignore[no-any-return]


def celery_workers(services: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    """Service name -> the queues its `celery worker` consumes."""
    workers = {}
    for name, service in services.items():
        command = as_list(service.get("command"))
        if command[:2] == ["celery", "worker"]:
            workers[name] = command[command.index("--queues") + 1].split(",")
    return workers


def compose_flows(services: dict[str, dict[str, Any]]) -> list[Any]:
    """The flows of the compose stack's mm2.properties, loaded as the workers load it."""
    from mirrorflow.config.loader import load_config

    worker = services["airflow-worker"]
    env = {k: str(v) for k, v in worker["environment"].items()}
    mount = next(v for v in worker["volumes"] if v.split(":")[1] == "/etc/mirrorflow")
    config = load_config(DOCKER / mount.split(":")[0] / Path(env["MIRRORFLOW_CONFIG"]).name, environ=env)
    return list(config.flows)


def spark_defaults() -> dict[str, str]:
    out = {}
    for line in (DOCKER / "spark" / "spark-defaults.conf").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, value = line.split(None, 1)
            assert key not in out, f"{key} is set twice"
            out[key] = value.strip()
    return out


@functools.cache
def spark_core_jar() -> zipfile.ZipFile:
    import pyspark

    [jar] = glob.glob(os.path.join(os.path.dirname(pyspark.__file__), "jars", "spark-core_*.jar"))
    return zipfile.ZipFile(jar)


def spark_constants(names: set[str]) -> set[str]:
    """Which of `names` are string constants of Spark's core classes (exact CONSTANT_Utf8 entries: a property
    Spark reads is declared as one, and a near miss such as a prefix of a real name does not match)."""
    wanted = {b"\x01" + len(n.encode()).to_bytes(2, "big") + n.encode(): n for n in names}
    found: set[str] = set()
    jar = spark_core_jar()
    for entry in jar.namelist():
        if entry.endswith(".class"):
            data = jar.read(entry)
            found |= {name for raw, name in wanted.items() if raw in data}
            if len(found) == len(wanted):
                break
    return found


def memory_bytes(value: str) -> int:
    number, unit = re.fullmatch(r"(\d+)([kmg]?)", value.lower()).groups()  # type: ignore[union-attr]
    return int(number) << {"": 0, "k": 10, "m": 20, "g": 30}[unit]


def mounts(service: dict[str, Any]) -> dict[str, str]:
    """Container path -> source of each volume."""
    return {v.split(":")[1]: v.split(":")[0] for v in service.get("volumes", [])}


# --- Celery -------------------------------------------------------------------------------------------------


def test_celery_runs_the_copy_on_its_own_queue_and_every_other_task_on_default(
    services: dict[str, dict[str, Any]],
) -> None:
    from mirrorflow.config.model import Flow

    airflow = {n: s for n, s in services.items() if "AIRFLOW__CORE__EXECUTOR" in s.get("environment", {})}
    assert len(airflow) >= 7
    broker = urlparse(next(iter(airflow.values()))["environment"]["AIRFLOW__CELERY__BROKER_URL"])
    for name, service in airflow.items():
        env = service["environment"]
        assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor", name
        assert urlparse(env["AIRFLOW__CELERY__BROKER_URL"]) == broker, name
        assert env["AIRFLOW__CELERY__RESULT_BACKEND"].startswith("db+postgresql://"), name
        assert "@postgres:5432/" in env["AIRFLOW__CELERY__RESULT_BACKEND"], name
        if service.get("restart") != "no":
            assert service["depends_on"]["redis"]["condition"] == "service_healthy", name
    assert broker.scheme == "redis" and broker.port == 6379
    assert services[str(broker.hostname)]["image"].startswith("redis:")
    assert services[str(broker.hostname)]["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]

    workers = celery_workers(services)
    consumers = [queue for queues in workers.values() for queue in queues]
    assert sorted(consumers) == ["default", "spark"], "one worker per queue"
    # Airflow puts a task without a queue on [operators] default_queue; Mirrorflow's key defaults to the same.
    default_queue = airflow_template()["operators"]["options"]["default_queue"]["default"]
    assert default_queue == "default" == Flow.model_fields["airflow_copy_queue"].default
    flows = compose_flows(services)
    assert flows and {f.airflow_copy_queue for f in flows} == {"spark"}
    for name in workers:
        service = services[name]
        assert int(as_list(service["command"])[as_list(service["command"]).index("--concurrency") + 1]) >= 1
        # Any queue may host a copy (a flow can keep the default): spark-submit's client-mode driver runs here,
        # and Spark's executors connect back to the hostname it advertises.
        assert service["hostname"] == name == service["environment"]["SPARK_LOCAL_HOSTNAME"], name
        assert service["depends_on"]["spark-master"]["condition"] == "service_healthy", name
        assert service["environment"]["DUMB_INIT_SETSID"] == "0", f"{name}: Celery's warm shutdown needs it"


# --- auth -----------------------------------------------------------------------------------------------------


def test_the_auth_manager_is_fab_and_airflow_init_creates_the_admin_through_its_cli(
    services: dict[str, dict[str, Any]], compose_text: str, tmp_path: Path
) -> None:
    for name, service in services.items():
        env = service.get("environment", {})
        if "AIRFLOW__CORE__EXECUTOR" in env:
            assert env["AIRFLOW__CORE__AUTH_MANAGER"] == FAB_AUTH_MANAGER, name
    assert "SimpleAuthManager" not in compose_text and "SIMPLE_AUTH_MANAGER" not in compose_text
    assert "apache-airflow-providers-fab" in stack_pins(), "FabAuthManager ships in the FAB provider"

    # The init script against recording `airflow` and `mirrorflow` commands: the calls it makes, in order.
    calls = tmp_path / "calls"
    for tool in ("airflow", "mirrorflow"):
        stub = tmp_path / tool
        stub.write_text(f'#!/bin/sh\necho "{tool} $*" >> {calls}\n')
        stub.chmod(0o755)
    init = services["airflow-init"]
    secret = "s3cret-admin-pw"
    env = {k: str(v) for k, v in init["environment"].items()}
    env.update(PATH=f"{tmp_path}:/usr/bin:/bin", AIRFLOW_ADMIN_PASSWORD=secret)
    script = DOCKER / "airflow-init.sh"
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, check=True)
    user = env["AIRFLOW_ADMIN_USER"]
    lines = calls.read_text().splitlines()
    assert lines[0] == "airflow db migrate"
    create = as_list(lines[1])
    assert create[:3] == ["airflow", "users", "create"]
    options = dict(zip(create[3::2], create[4::2], strict=True))
    # FAB's `users create` requires all six (apache-airflow-providers-fab's CLI definition).
    assert set(options) == {"--username", "--password", "--firstname", "--lastname", "--email", "--role"}
    assert options["--username"] == user and options["--password"] == secret and options["--role"] == "Admin"
    assert lines[2] == f"airflow users reset-password --username {user} --password {secret}"
    assert lines[-1] == f"mirrorflow validate {env['MIRRORFLOW_CONFIG']}"
    assert secret not in done.stdout + done.stderr

    env["AIRFLOW_ADMIN_PASSWORD"] = ""
    refused = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, check=False)
    assert refused.returncode != 0 and "set AIRFLOW_ADMIN_PASSWORD in docker/.env" in refused.stderr


# --- health checks and limits ---------------------------------------------------------------------------------


def listening_ports(name: str, service: dict[str, Any]) -> set[int]:
    """Ports the service's process listens on: published container ports and the ports its command sets."""
    ports = {int(p.split(":")[1]) for p in service.get("ports", [])}
    command = " ".join(as_list(service.get("command")))
    ports |= {int(p) for p in re.findall(r"--(?:webui-)?port (\d+)", command)}
    if as_list(service.get("command")) == ["scheduler"]:
        template = airflow_template()["scheduler"]["options"]
        ports.add(int(template["scheduler_health_check_server_port"]["default"]))
    if HISTORY_SERVER in command:
        ports.add(int(spark_defaults().get("spark.history.ui.port", HISTORY_UI_PORT)))
    return ports


def test_every_long_running_service_has_a_health_check_that_probes_it(services: dict[str, dict[str, Any]]) -> None:
    from airflow.cli.cli_config import ARG_JOB_TYPE_FILTER

    jobs = {"dag-processor": "DagProcessorJob", "triggerer": "TriggererJob"}
    for name, service in services.items():
        if service.get("restart") == "no":  # a one-shot: awaited by its exit code, not by a health check
            assert "healthcheck" not in service, name
            for other in services.values():
                if name in other.get("depends_on", {}):
                    assert other["depends_on"][name]["condition"] == "service_completed_successfully"
            continue
        assert "healthcheck" in service, f"{name} has no health check"
        test = service["healthcheck"]["test"]
        command = as_list(service.get("command"))
        if command and command[0] in jobs:
            job = jobs[command[0]]
            assert job in ARG_JOB_TYPE_FILTER.kwargs["choices"]
            assert test == ["CMD", "airflow", "jobs", "check", "--job-type", job, "--local"], name
        elif name in celery_workers(services):
            assert test[0] == "CMD-SHELL", name
            assert f"celery --app {CELERY_APP} inspect ping -d " in test[1], name
            assert '"celery@${HOSTNAME}"' in test[1], f"{name}: ping this worker only"
        urls = [urlparse(arg) for arg in test if arg.startswith("http://")]
        for url in urls:
            assert url.hostname == "localhost", name
            assert url.port in listening_ports(name, service), f"{name}: nothing listens on {url.port}"
            assert test[1] in ("curl", "wget"), name
    probed = {n for n, s in services.items() if any("http://" in a for a in s.get("healthcheck", {}).get("test", []))}
    assert {"spark-master", "spark-worker", "spark-history", "metrics", "prometheus", "grafana"} <= probed


def test_every_long_running_service_has_memory_and_cpu_limits_from_the_env_example(
    compose_text: str, services: dict[str, dict[str, Any]]
) -> None:
    raw = yaml.safe_load(compose_text)["services"]  # as written: each limit is a documented variable
    documented = env_example()
    for name, service in raw.items():
        if service.get("restart") == "no":
            continue
        limits = service.get("deploy", {}).get("resources", {}).get("limits")
        assert limits, f"{name} has no resource limits"
        for key in ("memory", "cpus"):
            variable, default = re.fullmatch(r"\$\{(\w+):-([^}]+)\}", str(limits[key])).groups()  # type: ignore[union-attr]
            assert documented.get(variable) == default, f"{name}: {variable} differs from .env.example"
    limit = {
        n: memory_bytes(s["deploy"]["resources"]["limits"]["memory"]) for n, s in services.items() if "deploy" in s
    }
    spark_worker = services["spark-worker"]["environment"]
    needed = memory_bytes(spark_worker["SPARK_WORKER_MEMORY"]) + memory_bytes(spark_worker["SPARK_DAEMON_MEMORY"])
    assert limit["spark-worker"] > needed, "the executors and the worker daemon must fit"
    [spark_queue] = [n for n, q in celery_workers(services).items() if "spark" in q]
    command = as_list(services[spark_queue]["command"])
    copies = int(command[command.index("--concurrency") + 1])
    assert limit[spark_queue] >= copies * GIB * 3 // 2, "about 1.5 GB per copy's driver"
    for kafka in ("kafka-primary", "kafka-backup"):
        assert limit[kafka] > GIB, "the broker's default heap is 1 GB"


# --- the image ------------------------------------------------------------------------------------------------


def test_the_image_packs_the_executor_env_and_points_every_copy_at_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mirrorflow.cli import spark_cmd
    from mirrorflow.cli.app import main
    from mirrorflow.spark import packaging

    instructions = dockerfile_instructions()
    runs = [rest for op, rest in instructions if op == "RUN"]
    [pack] = [i for i, rest in enumerate(runs) if "mirrorflow spark pack" in rest]
    installed = next(i for i, rest in enumerate(runs) if "pip install --no-deps -e ." in rest)
    assert pack > installed, "pack after Mirrorflow and its requirements are installed"
    directory = re.search(r"mirrorflow spark pack --dir (\S+)", runs[pack]).group(1)  # type: ignore[union-attr]
    env = dict(item.split("=", 1) for op, rest in instructions if op == "ENV" for item in rest.split() if "=" in item)
    archive = env[packaging.ARCHIVE_ENV]
    # Set only after the pack: `spark pack` itself honours the variable and would refuse the unbuilt file.
    set_at = next(i for i, (op, rest) in enumerate(instructions) if op == "ENV" and packaging.ARCHIVE_ENV in rest)
    packed_at = next(i for i, (op, rest) in enumerate(instructions) if op == "RUN" and "spark pack" in rest)
    assert set_at > packed_at

    # The real `spark pack` (its env build swapped for a file: no pip here) writes the file the ENV names.
    built = tmp_path / "built.tar.gz"
    built.write_bytes(b"packed")
    monkeypatch.setattr(spark_cmd, "packed_env", lambda **_: built)
    target = tmp_path / directory.lstrip("/")
    with pytest.raises(SystemExit) as exited:
        main(["spark", "pack", "--dir", str(target)])
    assert exited.value.code in (0, None)
    shipped = target / Path(archive).relative_to(directory)
    assert shipped.read_bytes() == b"packed"
    # ...and a copy given that variable ships it instead of building one (no pip at run time).
    monkeypatch.setenv(packaging.ARCHIVE_ENV, str(shipped))
    assert packaging.packed_env() == shipped


# --- Spark monitoring -----------------------------------------------------------------------------------------


def test_the_history_server_reads_the_event_log_every_copy_driver_writes(services: dict[str, dict[str, Any]]) -> None:
    defaults = spark_defaults()
    assert defaults["spark.eventLog.enabled"] == "true"
    assert defaults["spark.history.fs.logDirectory"] == defaults["spark.eventLog.dir"]
    events = defaults["spark.eventLog.dir"].removeprefix("file:")
    [history] = [n for n, s in services.items() if HISTORY_SERVER in as_list(s.get("command"))]
    drivers = list(celery_workers(services))  # every queue can host a copy's driver
    spark = [n for n, s in services.items() if "org.apache.spark.deploy" in " ".join(as_list(s.get("command")))]
    for name in {history, *drivers, *spark}:
        service = services[name]
        conf_dir = service["environment"]["SPARK_CONF_DIR"]
        source = mounts(service)[conf_dir]
        assert (DOCKER / source / "spark-defaults.conf").is_file(), name
        if name in (history, *drivers):
            volume = mounts(service).get(events)
            assert volume is not None and not volume.startswith("."), f"{name}: no event-log volume at {events}"
    assert {mounts(services[n])[events] for n in (history, *drivers)} == {"spark-events"}
    assert [int(p.split(":")[1]) for p in services[history]["ports"]] == [HISTORY_UI_PORT]
    # A fresh named volume takes its mount point's owner: the image creates it for the drivers' user.
    runs = " ".join(rest for op, rest in dockerfile_instructions() if op == "RUN")
    assert re.search(rf"mkdir -p [^&]*{events}", runs) and re.search(rf"chown airflow:0 [^&]*{events}", runs)


def test_spark_defaults_name_real_spark_properties_and_prometheus_scrapes_them(
    services: dict[str, dict[str, Any]],
) -> None:
    defaults = spark_defaults()
    plain = {k for k in defaults if not k.startswith("spark.metrics.conf.")}
    missing = plain - spark_constants(plain | {"spark.eventLog.enable"})
    assert missing == set(), f"not properties of Spark {__import__('pyspark').__version__}: {sorted(missing)}"
    assert spark_constants({"spark.eventLog.enable"}) == set(), "the check must refuse a near miss"
    servlet_paths = {}
    for key, value in defaults.items():
        if not key.startswith("spark.metrics.conf."):
            continue
        instance, kind, _sink, option = key.removeprefix("spark.metrics.conf.").split(".")
        assert instance in METRICS_INSTANCES and kind == "sink" and option in ("class", "path"), key
        if option == "class":
            assert f"{value.replace('.', '/')}.class" in spark_core_jar().namelist(), key
        else:
            servlet_paths[instance] = value
    assert defaults["spark.ui.prometheus.enabled"] == "true"
    assert defaults["spark.metrics.conf.*.sink.prometheusServlet.class"].endswith(".PrometheusServlet")

    scrape = yaml.safe_load((DOCKER / "prometheus" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in scrape["scrape_configs"]}
    master_ui = listening_ports("spark-master", services["spark-master"]) - {7077}
    worker_ui = listening_ports("spark-worker", services["spark-worker"])
    for job, instance, host, ports in (
        ("spark-master", "master", "spark-master", master_ui),
        ("spark-applications", "applications", "spark-master", master_ui),
    ):
        assert jobs[job]["metrics_path"] == servlet_paths[instance]
        [target] = [t for c in jobs[job]["static_configs"] for t in c["targets"]]
        assert target.split(":")[0] == host and int(target.split(":")[1]) in ports
    worker = jobs["spark-worker"]
    assert worker["metrics_path"] == servlet_paths["*"]
    [sd] = worker["dns_sd_configs"]
    assert sd["names"] == ["spark-worker"] and sd["port"] in worker_ui


def test_the_deploy_guide_names_every_service_and_the_packed_env() -> None:
    guide = (REPO / "docs" / "deploy.md").read_text()
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    table = guide[guide.index("## Services") :].split("\n## ")[0]
    for name in compose["services"]:
        assert f"`{name}`" in table, f"docs/deploy.md's Services table does not list {name}"
    for variable in env_example():
        assert variable in guide or variable.endswith(("_MEM_LIMIT", "_CPUS", "_PORT", "_CLUSTER_ID")), variable
    assert "MIRRORFLOW_SPARK_ENV_ARCHIVE" in guide and "mirrorflow spark pack" in guide
    assert "nothing is shipped" not in guide.lower()
