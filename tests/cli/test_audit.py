"""`mirrorflow audit` on bad input: exit code 2, one clear line, no traceback, no cluster contacted."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirrorflow.cli.app import main
from mirrorflow.local.properties import mm2_config_text


@pytest.mark.parametrize("flow", ["A-B", "A->", "->B", "B->A"])
def test_a_flow_that_is_not_run_by_the_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flow: str
) -> None:
    config = tmp_path / "mm2.properties"
    # Unreachable addresses: the refusal must come before any connection attempt.
    config.write_text(mm2_config_text({"A": "127.0.0.1:1", "B": "127.0.0.1:2"}, "A->B.enabled = true\n"))
    with pytest.raises(SystemExit) as exited:
        main(["audit", str(config), "--flow", flow, "--json"])
    _out, err = capsys.readouterr()
    assert exited.value.code == 2
    assert "Traceback" not in err
    assert flow in err
