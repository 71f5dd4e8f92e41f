"""Helpers of the CLI tests: the installed `mirrorflow` script, a config for the session clusters, and the
CLI run in-process with its exit code and output."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mirrorflow.cli.app import main
from mirrorflow.local.cluster import LocalClusters
from mirrorflow.local.properties import mm2_config_text

MIRRORFLOW = Path(sys.executable).with_name("mirrorflow")


def write_config(path: Path, clusters: LocalClusters, body: str) -> Path:
    """An mm2.properties for the session clusters A and B, then `body` (flows, overrides)."""
    path.write_text(mm2_config_text({a: clusters.bootstrap(a) for a in ("A", "B")}, body))
    return path


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `mirrorflow <args>` run in this process; a non-integer exit is 1."""
    with pytest.raises(SystemExit) as exited:
        main(list(args))
    out, err = capsys.readouterr()
    code = exited.value.code
    return (code if isinstance(code, int) else 1), out, err
