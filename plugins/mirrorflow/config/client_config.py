"""Settings of one Kafka client (a flow's source consumer, a cluster's admin...), secrets kept as `SecretStr`.

Keys are the Java client's, as written in mm2.properties, so `masked()` reads like the file. `librdkafka()`
is the only way to see secrets in clear, and is meant to be handed straight to confluent-kafka.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, SecretStr, SerializationInfo, field_serializer

from mirrorflow.config.keys import is_secret_key
from mirrorflow.config.librdkafka import to_librdkafka

MASK = "***"


class ClientConfig(BaseModel):
    """Java-style client settings; `secrets` holds the keys `is_secret_key` flags (passwords, JAAS, keys)."""

    model_config = ConfigDict(frozen=True)

    settings: dict[str, str] = {}
    secrets: dict[str, SecretStr] = {}

    @classmethod
    def from_mapping(cls, props: Mapping[str, str]) -> ClientConfig:
        return cls(
            settings={k: v for k, v in sorted(props.items()) if not is_secret_key(k)},
            secrets={k: SecretStr(v) for k, v in sorted(props.items()) if is_secret_key(k)},
        )

    @field_serializer("secrets")
    def _serialize_secrets(self, secrets: dict[str, SecretStr], info: SerializationInfo) -> dict[str, str]:
        reveal = isinstance(info.context, dict) and bool(info.context.get("reveal_secrets"))
        return {k: (v.get_secret_value() if reveal else MASK) for k, v in secrets.items()}

    def get(self, key: str) -> str | None:
        """A non-secret setting (secrets are reachable only through `librdkafka()`)."""
        return self.settings.get(key)

    def masked(self) -> dict[str, str]:
        """All settings, secrets shown as `***`: safe for logs and output."""
        merged = dict(self.settings)
        merged.update({k: MASK for k in self.secrets})
        return dict(sorted(merged.items()))

    def librdkafka(self) -> dict[str, str]:
        """The confluent-kafka config, secrets in clear: pass it to a client, never print or store it."""
        conf, _ = to_librdkafka(self._java())
        return conf

    def librdkafka_notes(self) -> list[str]:
        """What `librdkafka()` drops or rewrites (keys only, no values)."""
        _, notes = to_librdkafka(self._java())
        return [f"{key}: {what}" for key, what in notes]

    def _java(self) -> dict[str, str]:
        merged = dict(self.settings)
        merged.update({k: v.get_secret_value() for k, v in self.secrets.items()})
        return merged
