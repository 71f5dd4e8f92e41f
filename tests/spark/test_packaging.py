"""What a cluster's executors get: the package zip, the packed env's pins, and the copy operator's cluster args.

The operator runs against a recording `spark-submit` (no JVM) and a stand-in archive (no env build); the real
cluster run is tests/spark/test_standalone_cluster.py.
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from tests.spark.copy_probe import copy_operator

from mirrorflow.spark.packaging import (
    ARCHIVE_ENV,
    EXECUTOR_PYTHON,
    cluster_submit_args,
    executor_pins,
    is_standalone,
    package_py_files,
    packed_env,
)

RECORDER = f"""#!{sys.executable}
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_SPARK_RECORD"], "w") as out:
    json.dump({{"argv": args, "pyspark_python": os.environ.get("PYSPARK_PYTHON")}}, out)
with open(args[args.index("--summary-file") + 1], "w") as out:
    json.dump({{"records": 5, "ranges": [{{}}], "executors": [{{"python": "./env/bin/python"}}]}}, out)
"""


def test_the_zip_holds_the_package_sources_without_bytecode(tmp_path: Path) -> None:
    names = zipfile.ZipFile(package_py_files(tmp_path)).namelist()
    assert "mirrorflow/__init__.py" in names
    assert "mirrorflow/replication/copy_range.py" in names
    assert "mirrorflow/local/kafka-runtime.xml" in names  # data files travel too
    assert not [name for name in names if name.endswith(".pyc") or "__pycache__" in name]


def test_executor_pins_are_the_drivers_own_versions() -> None:
    assert executor_pins() == [
        f"{name}=={importlib.metadata.version(name)}" for name in ("confluent-kafka", "pydantic", "jproperties")
    ]


def test_cluster_args_ship_zip_and_env_and_point_executors_at_it() -> None:
    args = cluster_submit_args(Path("/x/mirrorflow.zip"), Path("/x/env.tar.gz"), driver_python="/venv/bin/python")
    assert args == [
        "--py-files", "/x/mirrorflow.zip", "--archives", "/x/env.tar.gz#env",
        "--conf", f"spark.pyspark.python={EXECUTOR_PYTHON}", "--conf", "spark.pyspark.driver.python=/venv/bin/python",
    ]  # fmt: skip
    assert is_standalone("spark://h:7077") and not is_standalone("local[2]") and not is_standalone("yarn")


def test_a_prebuilt_archive_is_used_as_given_and_a_missing_one_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "env.tar.gz"
    monkeypatch.setenv(ARCHIVE_ENV, str(archive))
    with pytest.raises(Exception, match="mirrorflow spark pack"):
        packed_env()
    archive.write_bytes(b"")
    assert packed_env() == archive


def test_the_copy_operator_ships_package_and_env_to_a_standalone_master(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    binary, record, archive, app = (tmp_path / n for n in ("spark-submit", "record.json", "env.tar.gz", "app.py"))
    binary.write_text(RECORDER)
    binary.chmod(0o755)
    archive.write_bytes(b"")
    app.write_text("")
    config = tmp_path / "mm2.properties"
    config.write_text("clusters = A, B\nA.bootstrap.servers = 127.0.0.1:1\nB.bootstrap.servers = 127.0.0.1:2\n")
    # The cores are set: deriving them reads the (here unreachable) source's partitions.
    config.write_text(config.read_text() + "A->B.enabled = true\nmirrorflow.spark.total.executor.cores = 3\n")
    # An earlier in-process local copy may have set PYSPARK_PYTHON in this process: judge the operator's own env.
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.setenv("FAKE_SPARK_RECORD", str(record))
    monkeypatch.setenv(ARCHIVE_ENV, str(archive))
    monkeypatch.setenv("AIRFLOW_CONN_MIRRORFLOW_SPARK", json.dumps({"conn_type": "spark", "host": "spark://m:7077"}))
    operator = copy_operator(config, "A->B", application=str(app), spark_binary=str(binary))
    result = operator.execute({})
    seen: dict[str, Any] = json.loads(record.read_text())
    argv = seen["argv"]
    assert argv[argv.index("--master") + 1] == "spark://m:7077"
    assert f"spark.archives={archive}#env" in argv
    assert "spark.cores.max=3" in argv  # --archives, set without the provider's private argument
    assert argv[argv.index("--py-files") + 1].endswith("mirrorflow.zip")
    assert f"spark.pyspark.python={EXECUTOR_PYTHON}" in argv
    assert f"spark.pyspark.driver.python={sys.executable}" in argv
    assert seen["pyspark_python"] is None or seen["pyspark_python"] != sys.executable
    # the driver runs here (client mode), so its summary comes back
    assert result is not None and (result["records"], result["master"]) == (5, "spark://m:7077")
    assert (operator.py_files, operator.conf) == (None, None)  # restored for a retry
