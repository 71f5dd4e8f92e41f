"""`${env:...}`, `${file:...}` and `${directory:...}` references, resolved as Kafka's config providers do."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from mirrorflow.config.issues import Issue, IssueLog
from mirrorflow.config.model import MirrorConfig
from mirrorflow.config.providers import ProviderError, Providers

Load = Callable[..., MirrorConfig]
Errors = Callable[..., list[Issue]]

DECLARED = """
config.providers = env, file, directory
config.providers.env.class = org.apache.kafka.common.config.provider.EnvVarConfigProvider
config.providers.file.class = org.apache.kafka.common.config.provider.FileConfigProvider
config.providers.directory.class = org.apache.kafka.common.config.provider.DirectoryConfigProvider
"""


def _providers(values: dict[str, str], environ: dict[str, str] | None = None) -> Providers:
    log = IssueLog("mm2.properties")
    providers = Providers.from_properties(values, environ or {}, log)
    assert log.issues == []
    return providers


def test_env_file_and_directory(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets.properties"
    secrets.write_text("kafka.password = from-file\n", encoding="utf-8")
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "token").write_text("from-dir", encoding="utf-8")
    providers = _providers({}, {"PW": "from-env"})
    assert providers.resolve("${env:PW}") == "from-env"
    assert providers.resolve(f"${{file:{secrets}:kafka.password}}") == "from-file"
    assert providers.resolve(f"x=${{directory:{tmp_path / 'dir'}:token}};y=${{env:PW}}") == "x=from-dir;y=from-env"
    assert providers.resolve("no references") == "no references"
    assert providers.undeclared_used == {"env", "file", "directory"}


def test_renamed_provider_and_allowlist(tmp_path: Path) -> None:
    values = {
        "config.providers": "vault",
        "config.providers.vault.class": "org.apache.kafka.common.config.provider.EnvVarConfigProvider",
        "config.providers.vault.param.allowlist.pattern": "KAFKA_.*",
    }
    providers = _providers(values, {"KAFKA_PW": "ok", "HOME_PW": "nope"})
    assert providers.resolve("${vault:KAFKA_PW}") == "ok"
    with pytest.raises(ProviderError, match="allowlist"):
        providers.resolve("${vault:HOME_PW}")
    assert providers.undeclared_used == set()


def test_allowed_paths(tmp_path: Path) -> None:
    outside = tmp_path / "outside.properties"
    outside.write_text("k = v\n", encoding="utf-8")
    values = {
        "config.providers": "file",
        "config.providers.file.class": "org.apache.kafka.common.config.provider.FileConfigProvider",
        "config.providers.file.param.allowed.paths": str(tmp_path / "allowed"),
    }
    with pytest.raises(ProviderError, match=r"allowed\.paths"):
        _providers(values).resolve(f"${{file:{outside}:k}}")


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        ("${env:MISSING}", "environment variable MISSING is not set"),
        ("${env:/x:MISSING}", "take no path"),
        ("${file:/nonexistent/x.properties:k}", "cannot read"),
        ("${directory:/nonexistent:f}", "is not a readable file"),
        ("${vault:secret/path:k}", "no config provider named 'vault'"),
    ],
)
def test_unresolvable(reference: str, message: str) -> None:
    with pytest.raises(ProviderError, match=message):
        _providers({}).resolve(reference)


def test_unsupported_provider_class(config_errors: Errors) -> None:
    issues = config_errors(
        "clusters = a, b\nconfig.providers = vault\nconfig.providers.vault.class = com.example.VaultProvider\n"
    )
    [issue] = [i for i in issues if i.key.startswith("config.providers")]
    assert (issue.line, issue.key) == (3, "config.providers.vault.class")
    assert "not supported" in issue.problem


def test_error_names_key_and_line_but_no_secret(config_errors: Errors, tmp_path: Path) -> None:
    secrets = tmp_path / "s.properties"
    secrets.write_text("present = hunter2\n", encoding="utf-8")
    issues = config_errors(
        DECLARED
        + "clusters = a, b\n"
        + "a.bootstrap.servers = a:9092\n"
        + "b.bootstrap.servers = b:9092\n"
        + f"a.ssl.keystore.password = ${{file:{secrets}:present}}\n"
        + f"a.ssl.key.password = ${{file:{secrets}:absent}}\n"
        + "a->b.enabled = true\n"
    )
    assert [(i.line, i.key) for i in issues] == [(9, "a.ssl.key.password")]
    assert "has no key 'absent'" in issues[0].problem
    assert all("hunter2" not in i.render() for i in issues)


def test_undeclared_provider_warns_that_mm2_would_not_resolve_it(load: Load) -> None:
    config = load(
        "clusters = a, b\na.bootstrap.servers = ${env:A_SERVERS}\nb.bootstrap.servers = b:9092\na->b.enabled = true\n",
        environ={"A_SERVERS": "a:9092"},
    )
    assert config.clusters["a"].bootstrap_servers == "a:9092"
    [warning] = [w for w in config.warnings if w.key == "config.providers"]
    assert "EnvVarConfigProvider" in warning.fix


def test_declared_providers_do_not_warn(load: Load) -> None:
    config = load(
        DECLARED
        + "clusters = a, b\na.bootstrap.servers = ${env:A}\n"
        + "b.bootstrap.servers = b:9092\na->b.enabled = true\n",
        environ={"A": "a:9092"},
    )
    assert config.warnings == ()
