"""The compose file and Dockerfile as the tests of tests/docker/ read them: compose's interpolation over
.env.example's values, the requirement pins, the Dockerfile's instructions. Shared by the test modules here."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
INTERPOLATION = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")
BARE_VARIABLE = re.compile(r"(?<!\$)\$(?!\$|\{)[A-Za-z_]")


def requirement_pins() -> dict[str, str]:
    pins = {}
    for line in (REPO / "requirements.txt").read_text().splitlines():
        name, sep, version = line.strip().partition("==")
        if sep and not line.startswith("#"):
            pins[name.lower()] = version
    return pins


def stack_pins() -> dict[str, str]:
    """docker/requirements.txt: the providers only the image installs (not the development venv)."""
    pins = {}
    for line in (DOCKER / "requirements.txt").read_text().splitlines():
        name, sep, version = line.strip().partition("==")
        if sep and not line.startswith("#"):
            pins[name.lower()] = version
    return pins


# The providers docker/requirements.txt pins are not installed where the tests run, so their config options are
# recorded here from each pinned version's `get_provider_info()["config"]`; the tests check the pins still
# match, so bumping one means re-recording it.
PROVIDER_OPTIONS: dict[str, dict[str, set[str]]] = {
    "apache-airflow-providers-celery==3.26.0": {
        "celery": {
            "celery_app_name", "worker_concurrency", "mp_start_method", "mp_forkserver_preload",
            "worker_autoscale", "worker_prefetch_multiplier", "worker_enable_remote_control", "json_logs",
            "task_logs_to_stdout", "broker_url", "result_backend", "result_backend_sqlalchemy_engine_options",
            "flower_host", "flower_url_prefix", "flower_port", "flower_basic_auth", "sync_parallelism",
            "celery_config_options", "ssl_active", "ssl_mutual_tls", "ssl_key", "ssl_cert", "ssl_cacert", "pool",
            "operation_timeout", "task_acks_late", "task_track_started", "task_publish_max_retries",
            "extra_celery_config", "worker_umask",
        },
    },
}  # fmt: skip


def env_example() -> dict[str, str]:
    out = {}
    for line in (DOCKER / ".env.example").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's interpolation (`${V}`, `${V:-d}`, `${V-d}`, `${V:?e}`, `$$`), failing where compose would."""

    def one(m: re.Match[str]) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3)
        value = env.get(name)
        if op in (":-", "-"):
            return arg if value is None or (op == ":-" and value == "") else value
        if op in (":?", "?") and (value is None or (op == ":?" and value == "")):
            raise AssertionError(f"compose would stop: {name}: {arg}")
        return value or ""

    return INTERPOLATION.sub(one, text.replace("$$", "\0")).replace("\0", "$")


def as_list(command: Any) -> list[str]:
    return shlex.split(command) if isinstance(command, str) else list(command or [])


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", (DOCKER / "Dockerfile").read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]
