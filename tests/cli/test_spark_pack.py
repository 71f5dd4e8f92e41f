"""`mirrorflow spark pack`: writes the package zip and the executor env, prints the spark-submit options."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from mirrorflow.cli.app import main
from mirrorflow.spark.packaging import ARCHIVE_ENV


def test_pack_writes_both_files_and_prints_the_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    prebuilt = tmp_path / "prebuilt.tar.gz"  # stands in for the cached env: no venv build in a unit test
    prebuilt.write_bytes(b"env")
    monkeypatch.setenv(ARCHIVE_ENV, str(prebuilt))
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exited:
        main(["spark", "pack", "--dir", str(out)])
    assert exited.value.code in (0, None)
    assert "mirrorflow/__init__.py" in zipfile.ZipFile(out / "mirrorflow.zip").namelist()
    assert (out / "mirrorflow-executor-env.tar.gz").read_bytes() == b"env"
    printed = capsys.readouterr().out
    assert f"{out.resolve()}/mirrorflow-executor-env.tar.gz#env" in printed  # the --archives value
    assert "spark.pyspark.python=./env/bin/python" in printed
