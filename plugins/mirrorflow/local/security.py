"""Secured local clusters: SASL/SCRAM, TLS (SSL) or both (SASL_SSL) on the broker listener.

The controller listener stays PLAINTEXT on loopback (only the broker itself talks to it). Everything a secured
cluster set needs lives in `<dir>/security/`: a throw-away CA, the broker's PEM keystore, a client PEM keystore
(TLS needs client certificates: `ssl.client.auth=required`), `security.json` (what `LocalClusters.open` reloads)
and `secrets.properties`, which the generated mm2.properties reads through `${file:...}` so the passwords never
appear in mm2.properties itself. Both secret files are mode 0600. Passwords are random, generated here.

SCRAM users exist from the first start: they are written into the metadata log when the storage is formatted
(`kafka-storage format --add-scram`), which the broker's own inter-broker login needs.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mirrorflow.core.errors import MirrorflowError, UsageError
from mirrorflow.local.files import FileIn

KINDS = {"sasl": "SASL_PLAINTEXT", "tls": "SSL", "sasl_ssl": "SASL_SSL"}
"""`mirrorflow local up --security KIND` → the broker listener's security protocol."""
MECHANISM = "SCRAM-SHA-512"
BROKER_USER = "admin"
CLIENT_USER = "mirrorflow"
SERVER_CN = "localhost"
CLIENT_CN = "mirrorflow-client"
SECURITY_DIR = "security"
SECRETS_FILE = "secrets.properties"
STATE_FILE = "security.json"
_SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule"
_FILE_PROVIDER = "org.apache.kafka.common.config.provider.FileConfigProvider"
_DAYS = "30"
_OPENSSL_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class LocalSecurity:
    """How the broker listener of every cluster in one directory is secured; secrets are left out of repr."""

    protocol: str
    directory: Path
    mechanism: str = MECHANISM
    users: dict[str, str] = field(default_factory=dict, repr=False)
    """SCRAM user → password (the broker's own user and the client user)."""
    key_password: str = field(default="", repr=False)
    """Password of the encrypted PEM private keys (broker and client)."""

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    ca_file = FileIn("directory", "ca.pem")
    server_keystore = FileIn("directory", "server-keystore.pem")
    client_keystore = FileIn("directory", "client-keystore.pem")
    secrets_file = FileIn("directory", SECRETS_FILE)

    @property
    def principals(self) -> list[str]:
        """Who authenticates on the broker listener (all super users: ACLs are not what is tested here)."""
        if self.uses_sasl:
            return [f"User:{user}" for user in self.users]
        return [f"User:CN={SERVER_CN}", f"User:CN={CLIENT_CN}"]


def kind_to_protocol(kind: str) -> str:
    try:
        return KINDS[kind.lower()]
    except KeyError:
        raise UsageError(f"--security {kind!r} is not known: use one of {', '.join(KINDS)}") from None


def create(kind: str, cluster_dir: Path) -> LocalSecurity:
    """New random passwords (and certificates when TLS is used) in `<cluster_dir>/security/`."""
    protocol = kind_to_protocol(kind)
    directory = (cluster_dir / SECURITY_DIR).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    users = {BROKER_USER: _password("broker"), CLIENT_USER: _password("client")} if protocol != "SSL" else {}
    security = LocalSecurity(
        protocol, directory, users=users, key_password=_password("key") if protocol != "SASL_PLAINTEXT" else ""
    )
    if security.uses_tls:
        _make_certificates(security)
    _write_private(directory / STATE_FILE, json.dumps(_to_state(security), indent=2) + "\n")
    _write_private(security.secrets_file, _secrets_text(security))
    return security


def load(cluster_dir: Path) -> LocalSecurity | None:
    """The security of the clusters in `cluster_dir`, or None for plain PLAINTEXT clusters."""
    path = cluster_dir / SECURITY_DIR / STATE_FILE
    if not path.exists():
        return None
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
        return LocalSecurity(
            state["protocol"],
            Path(state["directory"]),
            state["mechanism"],
            dict(state["users"]),
            state["key_password"],
        )
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise MirrorflowError(
            f"{path} is not a security file of `mirrorflow local` ({type(err).__name__}); "
            f"delete the directory {cluster_dir} and start the clusters afresh"
        ) from None


def server_properties(base: Mapping[str, str], security: LocalSecurity) -> dict[str, str]:
    """`base` (a PLAINTEXT broker's server.properties) with its PLAINTEXT listener secured."""
    props = dict(base)
    name = security.protocol
    for key in ("listeners", "advertised.listeners"):
        props[key] = ",".join(
            f"{name}://{item.split('://', 1)[1]}" if item.strip().startswith("PLAINTEXT://") else item
            for item in props[key].split(",")
        )
    props["listener.security.protocol.map"] = ",".join(
        f"{name}:{name}" if item.strip() == "PLAINTEXT:PLAINTEXT" else item
        for item in props["listener.security.protocol.map"].split(",")
    )
    props["inter.broker.listener.name"] = name
    props["super.users"] = ";".join(["User:ANONYMOUS", *security.principals])  # ANONYMOUS: the controller
    if security.uses_sasl:
        # Mechanisms a caller enabled besides SCRAM (tests add OAUTHBEARER) stay enabled.
        enabled = [m.strip() for m in props.get("sasl.enabled.mechanisms", "").split(",") if m.strip()]
        props["sasl.enabled.mechanisms"] = ",".join(dict.fromkeys([security.mechanism, *enabled]))
        props["sasl.mechanism.inter.broker.protocol"] = security.mechanism
        props[f"listener.name.{name.lower()}.{security.mechanism.lower()}.sasl.jaas.config"] = _jaas(
            BROKER_USER, security.users[BROKER_USER]
        )
    if security.uses_tls:
        props.update(
            {
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(security.server_keystore),
                "ssl.key.password": security.key_password,
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(security.ca_file),
                "ssl.client.auth": "none" if security.uses_sasl else "required",
            }
        )
    return props


def storage_format_args(security: LocalSecurity | None) -> list[str]:
    """`kafka-storage format` arguments creating the SCRAM users in the first metadata records."""
    if security is None or not security.uses_sasl:
        return []
    args: list[str] = []
    for user, password in security.users.items():
        args += ["--add-scram", f"{security.mechanism}=[name={user},password={password}]"]
    return args


def client_config(security: LocalSecurity | None, user: str = CLIENT_USER) -> dict[str, str]:
    """librdkafka settings for a client of these clusters (secrets in clear: hand straight to a client)."""
    if security is None:
        return {}
    conf = {"security.protocol": security.protocol}
    if security.uses_sasl:
        conf.update({"sasl.mechanism": security.mechanism, "sasl.username": user})
        conf["sasl.password"] = security.users[user]
    if security.uses_tls:
        conf["ssl.ca.location"] = str(security.ca_file)
        if not security.uses_sasl:
            conf.update(
                {
                    "ssl.key.location": str(security.client_keystore),
                    "ssl.certificate.location": str(security.client_keystore),
                    "ssl.key.password": security.key_password,
                }
            )
    return conf


def java_client_properties(security: LocalSecurity | None, *, inline_secrets: bool = False) -> dict[str, str]:
    """The Java client keys (as in mm2.properties, without the alias prefix) for the client user.

    Passwords are `${file:<secrets.properties>:KEY}` references unless `inline_secrets`; the file provider
    must then be declared (`mm2_provider_properties`), as MM2 requires.
    """
    if security is None:
        return {}

    def secret(key: str, value: str) -> str:
        return value if inline_secrets else f"${{file:{security.secrets_file}:{key}}}"

    props = {"security.protocol": security.protocol}
    if security.uses_sasl:
        props["sasl.mechanism"] = security.mechanism
        props["sasl.jaas.config"] = _jaas(CLIENT_USER, secret("sasl.password", security.users[CLIENT_USER]))
    if security.uses_tls:
        props.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(security.ca_file)})
        if not security.uses_sasl:
            props.update(
                {
                    "ssl.keystore.type": "PEM",
                    "ssl.keystore.location": str(security.client_keystore),
                    "ssl.key.password": secret("ssl.key.password", security.key_password),
                }
            )
    return props


def mm2_provider_properties() -> dict[str, str]:
    """Declares the `file` config provider the way MM2 needs it to resolve `${file:...}`."""
    return {"config.providers": "file", "config.providers.file.class": _FILE_PROVIDER}


def mm2_properties(security: LocalSecurity | None, aliases: list[str]) -> dict[str, str]:
    """Per-alias client keys for the generated mm2.properties (empty for plain clusters)."""
    if security is None:
        return {}
    props = mm2_provider_properties()
    for alias in aliases:
        props.update({f"{alias}.{key}": value for key, value in java_client_properties(security).items()})
    return props


def secret_values(security: LocalSecurity | None) -> list[str]:
    """Every secret these clusters use, for tests that search output for leaks."""
    if security is None:
        return []
    return [v for v in [*security.users.values(), security.key_password] if v]


# ------------------------------------------------------------------------------------------------- internals


def _password(role: str) -> str:
    # Letters and digits only: the value goes into `--add-scram name=..,password=..` and JAAS quotes unescaped.
    return f"mf{role}{secrets.token_hex(12)}"


def _jaas(user: str, password: str) -> str:
    return f'{_SCRAM_LOGIN} required username="{user}" password="{password}";'


def _secrets_text(security: LocalSecurity) -> str:
    lines = ["# Secrets of the local clusters; mm2.properties reads them with ${file:...}."]
    if security.uses_sasl:
        lines.append(f"sasl.password={security.users[CLIENT_USER]}")
    if security.key_password:
        lines.append(f"ssl.key.password={security.key_password}")
    return "\n".join(lines) + "\n"


def _to_state(security: LocalSecurity) -> dict[str, object]:
    return {
        "protocol": security.protocol,
        "directory": str(security.directory),
        "mechanism": security.mechanism,
        "users": security.users,
        "key_password": security.key_password,
    }


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


def _make_certificates(security: LocalSecurity) -> None:
    """A CA, and a CA-signed certificate with an encrypted PKCS#8 key for the broker and for the client."""
    d = security.directory
    ca_key = d / "ca.key"
    _openssl(
        *("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out", str(security.ca_file)),
        *("-days", _DAYS, "-subj", "/CN=mirrorflow-local-ca"),
    )
    os.chmod(ca_key, 0o600)
    for name, cn, san in (
        ("server", SERVER_CN, "subjectAltName=DNS:localhost,IP:127.0.0.1"),
        ("client", CLIENT_CN, None),
    ):
        key, cert = d / f"{name}.key", d / f"{name}.crt"
        # The key password goes through the environment, never the command line (visible in `ps`).
        env = {**os.environ, "MF_KEY_PASSWORD": security.key_password}
        # Java cannot decrypt OpenSSL 3's default PBES2 keys ("PBES2 SecretKeyFactory not available"); the
        # PKCS#12 PBE scheme reads in both Java and librdkafka. The clear key only passes through a pipe.
        clear_key = _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048")
        _openssl(
            *("pkcs8", "-topk8", "-v1", "PBE-SHA1-3DES", "-passout", "env:MF_KEY_PASSWORD", "-out", str(key)),
            env=env,
            stdin=clear_key,
        )
        _openssl(
            *("req", "-x509", "-CA", str(security.ca_file), "-CAkey", str(ca_key), "-key", str(key)),
            *("-passin", "env:MF_KEY_PASSWORD", "-subj", f"/CN={cn}", "-days", _DAYS, "-out", str(cert)),
            *("-addext", "basicConstraints=critical,CA:FALSE"),
            *(("-addext", san) if san else ()),
            env=env,
        )
        keystore = security.server_keystore if name == "server" else security.client_keystore
        _write_private(keystore, key.read_text() + cert.read_text() + security.ca_file.read_text())
        key.unlink()


def _openssl(*args: str, env: Mapping[str, str] | None = None, stdin: str | None = None) -> str:
    try:
        result = subprocess.run(
            ["openssl", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=_OPENSSL_TIMEOUT_S,
            env=dict(env) if env is not None else None,
            check=False,
        )
    except FileNotFoundError:
        raise MirrorflowError("`openssl` is not installed; TLS local clusters need it to make certificates") from None
    if result.returncode != 0:
        tail = "\n".join(f"  | {line}" for line in result.stderr.strip().splitlines()[-10:])
        raise MirrorflowError(f"openssl {args[0]} failed (exit code {result.returncode}):\n{tail}")
    return result.stdout
