"""Java Kafka client settings → librdkafka (confluent-kafka) settings.

mm2.properties speaks the Java client's language; confluent-kafka speaks librdkafka's. Most names are shared.
The rest is renamed (`fetch.max.wait.ms` → `fetch.wait.max.ms`), rewritten (`sasl.jaas.config` →
`sasl.username`/`sasl.password`, PEM stores → `ssl.ca.location`...), or dropped because only a JVM
understands it (serializers, `buffer.memory`, JKS stores, and every other Java client name librdkafka lacks).
Each rewrite or drop yields a note naming the key, never the value. `classify_client_key` tells validation which
of these a key is, so that a name neither client knows (a typo) is refused before any client is built.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal

from mirrorflow.config.client_names import JAVA_CLIENT_KEYS, LIBRDKAFKA_KEYS
from mirrorflow.config.keys import suggest

Note = tuple[str, str]
"""(Java key, what happened to it) — never the value."""

_RENAMED = {
    "fetch.max.wait.ms": "fetch.wait.max.ms",
    "receive.buffer.bytes": "socket.receive.buffer.bytes",
    "send.buffer.bytes": "socket.send.buffer.bytes",
    "max.request.size": "message.max.bytes",
}
_SOCKET_BUFFERS = ("receive.buffer.bytes", "send.buffer.bytes")
_JAVA_ONLY = {
    "buffer.memory": "librdkafka sizes its queue with queue.buffering.max.kbytes",
    "key.serializer": "records are copied as raw bytes",
    "value.serializer": "records are copied as raw bytes",
    "key.deserializer": "records are copied as raw bytes",
    "value.deserializer": "records are copied as raw bytes",
    "max.block.ms": "a Java producer setting",
    "default.api.timeout.ms": "a Java client setting",
    "exclude.internal.topics": "a Java consumer setting",
    "internal.leave.group.on.close": "a Java consumer setting",
    "interceptor.classes": "Java classes cannot run here",
    "metric.reporters": "Java classes cannot run here",
    "partitioner.class": "Java classes cannot run here",
    "security.providers": "Java classes cannot run here",
    "auto.include.jmx.reporter": "a JVM setting",
    "metadata.max.idle.ms": "a Java producer setting",
    "ssl.protocol": "OpenSSL negotiates the TLS version",
    "ssl.enabled.protocols": "OpenSSL negotiates the TLS version",
    "ssl.provider": "a JVM security setting",
    "ssl.keymanager.algorithm": "a JVM security setting",
    "ssl.trustmanager.algorithm": "a JVM security setting",
    "ssl.secure.random.implementation": "a JVM security setting",
    "ssl.engine.factory.class": "Java classes cannot run here",
    "ssl.cipher.suites": "Java cipher suite names differ from OpenSSL's",
    "sasl.kerberos.kinit.cmd": "librdkafka's kinit command has a different format",
    "sasl.client.callback.handler.class": "Java classes cannot run here",
    "sasl.login.callback.handler.class": "Java classes cannot run here",
    "sasl.login.class": "Java classes cannot run here",
}
_JAVA_ONLY_PREFIXES = ("sasl.login.", "sasl.kerberos.ticket.", "metrics.", "partitioner.")
# Settings a Java interceptor (interceptor.classes, dropped) reads from its client's config: Confluent's
# monitoring interceptors are in many MM2 deployments' files.
_INTERCEPTOR_PREFIXES = ("confluent.monitoring.interceptor.",)
_INTERCEPTOR_NOTE = "read by a Java interceptor (interceptor.classes), which cannot run here"
_JAVA_ONLY_OAUTH = (
    "sasl.oauthbearer.",
    "librdkafka only reads token.endpoint.url, client credentials and scope",
)
_RDKAFKA_OAUTH = {
    "sasl.oauthbearer.token.endpoint.url", "sasl.oauthbearer.method", "sasl.oauthbearer.client.id",
    "sasl.oauthbearer.client.secret", "sasl.oauthbearer.scope", "sasl.oauthbearer.config",
    "sasl.oauthbearer.extensions",
}  # fmt: skip
_ASSIGNORS = {
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky",
}
_TRUSTSTORE_HINT = (
    "librdkafka cannot read Java truststores: set ssl.truststore.type = PEM with a PEM CA bundle in "
    "ssl.truststore.location (used as librdkafka's ssl.ca.location), or set ssl.ca.location"
)
_JVM_CA_STORE_HINT = (
    "it is the JVM's public CA list; librdkafka verifies against the system CA store instead "
    "(set ssl.truststore.type = PEM with a PEM bundle to choose the CAs)"
)
_KEYSTORE_HINT = "librdkafka cannot read JKS keystores: convert it to PKCS12 or PEM and set ssl.keystore.type"
_TRUSTSTORE_FIX = (
    "export the CA certificates as PEM (`keytool -exportcert -rfc -alias CA_ALIAS -keystore STORE > ca.pem`) and "
    "set ssl.truststore.type = PEM and ssl.truststore.location = ca.pem (MM2 reads PEM truststores too)"
)
_KEYSTORE_FIX = (
    "convert it (`keytool -importkeystore -srckeystore STORE -destkeystore store.p12 -deststoretype PKCS12`) "
    "and set ssl.keystore.type = PKCS12, or use ssl.keystore.type = PEM (MM2 reads both)"
)


ClientKeyKind = Literal["librdkafka", "translated", "dropped", "unknown"]
_NO_EQUIVALENT = "a Java client setting librdkafka has no equivalent for"
_TRANSLATED = {"ssl.key.password", "sasl.jaas.config"} | {
    k for k in JAVA_CLIENT_KEYS if k.startswith(("ssl.truststore.", "ssl.keystore."))
}
_CANDIDATES = sorted(LIBRDKAFKA_KEYS | JAVA_CLIENT_KEYS)


def classify_client_key(key: str) -> tuple[ClientKeyKind, str]:
    """What `to_librdkafka` does with a client key, for `mirrorflow validate`: (kind, detail).

    `librdkafka`: passed as is. `translated`: renamed or rewritten (detail: how). `dropped`: a Java client key
    with no meaning for librdkafka (detail: why; a warning, since the same file must still run under MM2).
    `unknown`: neither a Java nor a librdkafka name, so a typo (detail: the closest name, or "").
    """
    if key in _RENAMED:
        return "translated", f"used as librdkafka's {_RENAMED[key]}"
    if key in _TRANSLATED:
        return "translated", "rewritten into librdkafka's ssl.* / sasl.* settings"
    if key in _JAVA_ONLY:
        return "dropped", _JAVA_ONLY[key]
    if key.startswith(_INTERCEPTOR_PREFIXES):
        return "dropped", _INTERCEPTOR_NOTE
    if key not in LIBRDKAFKA_KEYS and key not in JAVA_CLIENT_KEYS:
        return "unknown", suggest(key, _CANDIDATES) or ""
    if key.startswith(_JAVA_ONLY_OAUTH[0]) and key not in _RDKAFKA_OAUTH:
        return "dropped", _JAVA_ONLY_OAUTH[1]
    if key.startswith(_JAVA_ONLY_PREFIXES):
        return "dropped", "a Java client setting"
    return ("librdkafka", "") if key in LIBRDKAFKA_KEYS else ("dropped", _NO_EQUIVALENT)


def unreadable_stores(props: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """(key, problem, fix) for TLS stores librdkafka cannot read: without them the TLS handshake would fail
    later with an opaque certificate error, so validation refuses the file instead (no value is named)."""
    problems = []
    trust_type = props.get("ssl.truststore.type", "JKS").strip().upper()
    if (
        trust_type != "PEM"
        and not _is_jvm_ca_store(props)
        and ("ssl.truststore.location" in props or "ssl.truststore.certificates" in props)
    ):
        problems.append(
            (
                "ssl.truststore.location",
                f"a {trust_type} truststore cannot be read by librdkafka (only PEM; JKS is Java's default type)",
                _TRUSTSTORE_FIX,
            )
        )
    key_type = props.get("ssl.keystore.type", "JKS").strip().upper()
    if key_type not in ("PEM", "PKCS12") and "ssl.keystore.location" in props:
        problems.append(
            (
                "ssl.keystore.location",
                f"a {key_type} keystore cannot be read by librdkafka (only PKCS12 or PEM; JKS is Java's default)",
                _KEYSTORE_FIX,
            )
        )
    return problems


_JAAS = re.compile(r"^\s*(?P<module>[\w.$]+)\s+(?P<flag>\w+)\s*(?P<options>.*?)\s*;?\s*$", re.DOTALL)
_JAAS_OPTION = re.compile(r'([\w.\-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))')


def parse_jaas(text: str) -> tuple[str, dict[str, str]] | None:
    """(login module class, options) of a one-module `sasl.jaas.config`, or None if it does not parse."""
    match = _JAAS.match(text)
    if match is None:
        return None
    options = {
        m.group(1): re.sub(r"\\(.)", r"\1", m.group(2)) if m.group(2) is not None else m.group(3)
        for m in _JAAS_OPTION.finditer(match.group("options"))
    }
    return match.group("module"), options


def to_librdkafka(props: Mapping[str, str]) -> tuple[dict[str, str], list[Note]]:
    """Translate Java client keys to a librdkafka config; returns (config, notes about changes)."""
    conf: dict[str, str] = {}
    notes: list[Note] = []
    for key, value in props.items():
        if key in _SOCKET_BUFFERS and value.strip() == "-1":
            conf[_RENAMED[key]] = "0"  # Java's "the OS default" is librdkafka's 0 (it refuses -1)
        elif key in _RENAMED:
            conf[_RENAMED[key]] = value
        elif key in _JAVA_ONLY:
            notes.append((key, f"dropped: {_JAVA_ONLY[key]}"))
        elif key.startswith(_JAVA_ONLY_PREFIXES):
            notes.append((key, "dropped: a Java client setting"))
        elif key.startswith(_INTERCEPTOR_PREFIXES):
            notes.append((key, f"dropped: {_INTERCEPTOR_NOTE}"))
        elif key.startswith(_JAVA_ONLY_OAUTH[0]) and key not in _RDKAFKA_OAUTH:
            notes.append((key, f"dropped: {_JAVA_ONLY_OAUTH[1]}"))
        elif key.startswith(("ssl.truststore.", "ssl.keystore.")) or key in (
            "ssl.key.password",
            "sasl.jaas.config",
        ):
            continue  # handled below, together with their companion keys
        elif key == "ssl.endpoint.identification.algorithm":
            conf[key] = value.strip().lower() or "none"
        elif key == "partition.assignment.strategy":
            _assignors(value, conf, notes)
        elif key == "auto.offset.reset":
            _offset_reset(value, conf, notes)
        elif key in JAVA_CLIENT_KEYS and key not in LIBRDKAFKA_KEYS:
            notes.append((key, f"dropped: {_NO_EQUIVALENT}"))
        else:
            conf[key] = value  # librdkafka's own name; an unknown one is refused by `mirrorflow validate`
    _truststore(props, conf, notes)
    _keystore(props, conf, notes)
    if "sasl.jaas.config" in props:
        _jaas(props, conf, notes)
    return conf, notes


def _assignors(value: str, conf: dict[str, str], notes: list[Note]) -> None:
    names = [_ASSIGNORS.get(c.strip(), c.strip()) for c in value.split(",") if c.strip()]
    unknown = [n for n in names if n not in _ASSIGNORS.values()]
    if unknown:
        notes.append(
            (
                "partition.assignment.strategy",
                "dropped: librdkafka has only range, roundrobin, cooperative-sticky",
            )
        )
    else:
        conf["partition.assignment.strategy"] = ",".join(names)


def _offset_reset(value: str, conf: dict[str, str], notes: list[Note]) -> None:
    trimmed = value.strip().lower()
    if trimmed == "none":
        conf["auto.offset.reset"] = "error"
    elif trimmed.startswith("by_duration"):
        notes.append(("auto.offset.reset", "by_duration dropped: librdkafka has no such policy"))
    else:
        conf["auto.offset.reset"] = trimmed


def _truststore(props: Mapping[str, str], conf: dict[str, str], notes: list[Note]) -> None:
    store_type = props.get("ssl.truststore.type", "JKS").strip().upper()
    if store_type == "PEM":
        if "ssl.truststore.location" in props:
            conf["ssl.ca.location"] = props["ssl.truststore.location"]
        if "ssl.truststore.certificates" in props:
            conf["ssl.ca.pem"] = props["ssl.truststore.certificates"]
    elif _is_jvm_ca_store(props):
        notes.append(("ssl.truststore.location", f"dropped: {_JVM_CA_STORE_HINT}"))
    elif "ssl.truststore.location" in props or "ssl.truststore.certificates" in props:
        notes.append(("ssl.truststore.location", f"dropped: {_TRUSTSTORE_HINT}"))


def _is_jvm_ca_store(props: Mapping[str, str]) -> bool:
    """The JVM's own list of public CAs: librdkafka's default, the system CA store, plays the same part."""
    location = props.get("ssl.truststore.location", "").strip().replace("\\", "/")
    return location.rsplit("/", 1)[-1] in ("cacerts", "jssecacerts")


def _keystore(props: Mapping[str, str], conf: dict[str, str], notes: list[Note]) -> None:
    store_type = props.get("ssl.keystore.type", "JKS").strip().upper()
    if store_type == "PEM":
        if "ssl.keystore.location" in props:  # one PEM file holding the private key and the certificate chain
            conf["ssl.key.location"] = props["ssl.keystore.location"]
            conf["ssl.certificate.location"] = props["ssl.keystore.location"]
        if "ssl.keystore.key" in props:
            conf["ssl.key.pem"] = props["ssl.keystore.key"]
        if "ssl.keystore.certificate.chain" in props:
            conf["ssl.certificate.pem"] = props["ssl.keystore.certificate.chain"]
        if "ssl.key.password" in props:
            conf["ssl.key.password"] = props["ssl.key.password"]
    elif store_type == "PKCS12":
        for key in ("ssl.keystore.location", "ssl.keystore.password"):
            if key in props:
                conf[key] = props[key]
    elif "ssl.keystore.location" in props:
        notes.append(("ssl.keystore.location", f"dropped: {_KEYSTORE_HINT}"))


def _jaas(props: Mapping[str, str], conf: dict[str, str], notes: list[Note]) -> None:
    parsed = parse_jaas(props["sasl.jaas.config"])
    if parsed is None:
        notes.append(("sasl.jaas.config", 'dropped: it does not parse as `LoginModule required key="value" ...;`'))
        return
    module, options = parsed
    simple = module.rsplit(".", 1)[-1]
    if simple in ("PlainLoginModule", "ScramLoginModule"):
        if "username" in options:
            conf["sasl.username"] = options["username"]
        if "password" in options:
            conf["sasl.password"] = options["password"]
        if simple == "PlainLoginModule":
            conf.setdefault("sasl.mechanism", "PLAIN")
    elif simple == "OAuthBearerLoginModule":
        if "sasl.oauthbearer.token.endpoint.url" in props:
            conf["sasl.oauthbearer.method"] = "oidc"
            for java, rdkafka in (
                ("clientId", "client.id"),
                ("clientSecret", "client.secret"),
                ("scope", "scope"),
            ):
                if java in options:
                    conf[f"sasl.oauthbearer.{rdkafka}"] = options[java]
            if options.get("ssl.truststore.type", "").upper() == "PEM" and "ssl.truststore.location" in options:
                conf["https.ca.location"] = options["ssl.truststore.location"]  # the token endpoint's CAs
        elif "unsecuredLoginStringClaim_sub" in options:
            conf["sasl.oauthbearer.config"] = f"principal={options['unsecuredLoginStringClaim_sub']}"
            conf["enable.sasl.oauthbearer.unsecure.jwt"] = "true"
        else:
            notes.append(("sasl.jaas.config", "dropped: OAUTHBEARER needs sasl.oauthbearer.token.endpoint.url"))
    elif simple == "Krb5LoginModule":
        if "keyTab" in options:
            conf["sasl.kerberos.keytab"] = options["keyTab"]
        if "principal" in options:
            conf["sasl.kerberos.principal"] = options["principal"]
    else:
        notes.append(("sasl.jaas.config", f"dropped: login module {simple} has no librdkafka equivalent"))
