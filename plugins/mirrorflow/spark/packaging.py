"""What a Spark cluster's executors need to run the copy: the package as `--py-files`, the rest as a packed venv.

Local masters run executors on the driver's interpreter, so nothing is shipped. A cluster's executors start
from a bare Python: pure-Python Mirrorflow rides in a zip on `--py-files`, but confluent-kafka (a C extension)
cannot be imported from a zip, so it and pydantic/jproperties travel as a packed virtualenv on
`--archives env.tar.gz#env`, which Spark unpacks into each executor's directory as `./env`. The env is slim
(only what executors import, at the driver's exact versions) and cached, keyed by those versions, so it is
built once per machine and Python, not once per job.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

import mirrorflow
from mirrorflow.core.errors import MirrorflowError
from mirrorflow.core.file_lock import file_lock

# Third-party distributions the executors import (the copy, the config model it unpickles); pip brings theirs.
EXECUTOR_DISTRIBUTIONS = ("confluent-kafka", "pydantic", "jproperties")
ARCHIVE_ALIAS = "env"
EXECUTOR_PYTHON = f"./{ARCHIVE_ALIAS}/bin/python"
CACHE_ENV = "MIRRORFLOW_CACHE"
"""The one cache root of Mirrorflow (Kafka jars, the registry, packed envs); `MIRRORFLOW_CACHE_DIR`, this
module's older name for it, is still read."""
LEGACY_CACHE_ENV = "MIRRORFLOW_CACHE_DIR"
ARCHIVE_ENV = "MIRRORFLOW_SPARK_ENV_ARCHIVE"
"""A prebuilt archive (`mirrorflow spark pack`) to ship instead of building one on this machine."""


def is_standalone(master: str) -> bool:
    return master.strip().startswith("spark://")


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or os.environ.get(LEGACY_CACHE_ENV) or Path.home() / ".cache" / "mirrorflow")


def executor_pins() -> list[str]:
    """`name==version` of each executor distribution as installed here: executors must match the driver."""
    pins = []
    for name in EXECUTOR_DISTRIBUTIONS:
        try:
            pins.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            raise MirrorflowError(
                f"{name} is not installed in {sys.executable}; install Mirrorflow's requirements.txt first"
            ) from None
    return pins


def package_py_files(directory: Path) -> Path:
    """Zip the installed `mirrorflow` package (sources and data files, no bytecode) into `directory`."""
    package = Path(mirrorflow.__file__).resolve().parent
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / "mirrorflow.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(package.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                archive.write(path, Path("mirrorflow") / path.relative_to(package))
    return target


def env_key(pins: Sequence[str], python: str) -> str:
    """Cache key of a packed env: the interpreter it links to and the pins it holds."""
    real = os.path.realpath(python)
    version = subprocess.run(
        [python, "-c", "import sys; print(sys.version)"], capture_output=True, text=True, check=True
    ).stdout.strip()
    return hashlib.sha1("\n".join([real, version, *pins]).encode()).hexdigest()[:16]


def packed_env(*, python: str | None = None, directory: Path | None = None, log: bool = False) -> Path:
    """The packed executor env for `python` (default: this interpreter), built on first use and cached.

    Executors run `./env/bin/python`, which venv-pack keeps as a link to the same interpreter path: the
    cluster's machines need that Python installed where it is here (as with any packed venv).
    """
    prebuilt = os.environ.get(ARCHIVE_ENV)
    if prebuilt:
        if not Path(prebuilt).is_file():
            raise MirrorflowError(f"{ARCHIVE_ENV}={prebuilt} does not exist; build it with `mirrorflow spark pack`")
        return Path(prebuilt)
    python = python or sys.executable
    pins = executor_pins()
    directory = directory or cache_dir() / "spark-env"
    target = directory / f"executor-env-{env_key(pins, python)}.tar.gz"
    if target.is_file():
        return target
    with file_lock(directory / ".build.lock"):
        if not target.is_file():  # another process may have built it while we waited
            _build(python, pins, target, log=log)
    return target


def _build(python: str, pins: list[str], target: Path, *, log: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="mirrorflow-env-", dir=target.parent) as tmp:
        venv = Path(tmp) / "env"
        partial = Path(tmp) / target.name
        steps = [
            [python, "-m", "venv", str(venv)],
            [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", *pins],
            [sys.executable, "-m", "venv_pack", "-p", str(venv), "-o", str(partial), "-q"],
        ]
        for step in steps:
            if log:
                print("$ " + " ".join(step), file=sys.stderr, flush=True)
            done = subprocess.run(step, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                detail = (done.stderr or done.stdout).strip().splitlines()[-5:]
                hint = "install venv-pack (requirements-dev.txt)" if "venv_pack" in step[2] else "check PyPI access"
                raise MirrorflowError(
                    f"building the Spark executor env failed at `{' '.join(step[:4])} ...`: "
                    + " / ".join(detail)
                    + f"; {hint}, or set {ARCHIVE_ENV} to a prebuilt archive"
                )
        partial.chmod(0o644)  # workers may run as another user
        shutil.move(partial, target)


def cluster_conf(driver_python: str | None = None) -> dict[str, str]:
    """Spark settings for a cluster master: executors run the shipped env, the client-mode driver this Python."""
    return {
        "spark.pyspark.python": EXECUTOR_PYTHON,
        "spark.pyspark.driver.python": driver_python or sys.executable,
    }


def cluster_submit_args(py_files: Path, archive: Path, driver_python: str | None = None) -> list[str]:
    """The spark-submit options that ship the package and the executor env (before the application)."""
    args = ["--py-files", str(py_files), "--archives", f"{archive}#{ARCHIVE_ALIAS}"]
    for key, value in cluster_conf(driver_python).items():
        args += ["--conf", f"{key}={value}"]
    return args
