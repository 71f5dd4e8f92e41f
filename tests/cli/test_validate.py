"""`mirrorflow validate`: the JSON contract of docs/design.md §6, human output, exit code 2 on errors, no secrets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mirrorflow.cli.app import main

CONFIGS = Path(__file__).resolve().parents[1] / "fixtures" / "configs"
MIRRORFLOW = Path(sys.executable).with_name("mirrorflow")
SECRETS = ("Src-Secret-4711", "Tgt-Secret-0815")


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(["validate", *args])
    out, err = capsys.readouterr()
    code = exited.value.code
    return (code if isinstance(code, int) else 1), out, err


def test_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, str(CONFIGS / "seed004_active_passive.properties"), "--json")
    assert (code, err) == (0, "")
    document = json.loads(out)
    assert {"flows", "ignored_keys"} <= document.keys()
    [flow] = document["flows"]
    assert (flow["source"], flow["target"]) == ("primary", "dr")
    assert flow["settings"]["topics"] == "^(?!__.*).*"
    assert flow["settings"]["sync.group.offsets.interval.seconds"] == "10"
    assert flow["settings"]["source.cluster.bootstrap.servers"].startswith("primary-kafka-1:9092")
    assert flow["settings"]["mirrorflow.delivery"] == "exactly-once"
    assert document["ignored_keys"] == ["tasks.max"]
    assert document["heartbeat_pairs"] == [["primary", "dr"], ["dr", "primary"]]
    assert len(document["warnings"]) == 3


@pytest.mark.parametrize("clusters", [["west-1", "west-2"], ["west-1,west-2"]])
def test_clusters_option_takes_several_aliases(capsys: pytest.CaptureFixture[str], clusters: list[str]) -> None:
    code, out, _ = _run(capsys, str(CONFIGS / "seed001_multi_dc.properties"), "--json", "--clusters", *clusters)
    assert code == 0
    flows = sorted(f"{f['source']}->{f['target']}" for f in json.loads(out)["flows"])
    assert flows == ["east-1->west-1", "north-1->west-1", "west-1->west-2", "west-2->west-1"]


def test_secrets_never_appear(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(CONFIGS / "seed004_basic_sasl.properties")
    for args in ((path, "--json"), (path,)):
        code, out, err = _run(capsys, *args)
        assert code == 0
        assert "***" in out
        for secret in SECRETS:
            assert secret not in out + err


def test_human_output(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, str(CONFIGS / "seed001_per_connector.properties"))
    assert code == 0
    assert "primary->backup" in out
    assert "Heartbeat pairs: primary->backup, backup->primary" in out
    assert "did you mean primary->backup.sync.group.offsets.enabled?" in out.replace("Did", "did")
    assert "isolation.level" in out


def test_transform_chain_is_shown(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, str(CONFIGS / "seed004_transforms.properties"))
    assert code == 0
    assert "source->target: transforms, in order:" in out
    assert "1. addHeaders: org.apache.kafka.connect.transforms.InsertHeader [built-in InsertHeader]" in out
    assert "unless isProduction" in out
    assert "2. maskPII: com.example.transforms.MaskPIITransform [built-in MaskPII] (fields=" in out


def test_errors_are_listed_one_per_line_with_exit_code_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "mm2.properties"
    path.write_text(
        "clusters = a, b\n"
        "a.bootstrap.servers = a:9092\n"
        "b.bootstrap.servers = b:9092\n"
        "a.sasl.jaas.config = org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="u" password="Hidden-Pass-99";\n'
        "a->b.enabled = yes\n"
        "a->b.topics = (\n",
        encoding="utf-8",
    )
    code, out, err = _run(capsys, str(path), "--json")
    assert (code, out) == (2, "")
    lines = err.splitlines()
    assert lines[0].startswith(f"{path}:5: a->b.enabled: expected true or false, found 'yes'. Write ")
    assert lines[1].startswith(f"{path}:6: a->b.topics: ")
    assert len(lines) == 2
    assert "Hidden-Pass-99" not in err


def test_unknown_cluster_in_subset(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, str(CONFIGS / "seed001_multi_dc.properties"), "--clusters", "south-1")
    assert code == 2
    assert "--clusters: 'south-1' is not in clusters" in err


def test_installed_command_exits_2_without_traceback(tmp_path: Path) -> None:
    result = subprocess.run(
        [str(MIRRORFLOW), "validate", str(CONFIGS / "seed000_nearby_bare_keys.properties")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.count("expected true or false, found an empty value") == 2
