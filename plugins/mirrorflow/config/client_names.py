"""The two vocabularies a client key in mm2.properties may come from, stored as data beside this module.

* `LIBRDKAFKA_KEYS`: every property the librdkafka bundled with the pinned confluent-kafka accepts as a string.
* `JAVA_CLIENT_KEYS`: every Java producer, consumer and admin config name of the Kafka release MM2 files target.

Both files are generated from the libraries themselves by `tests/config/client_key_tables.py`, and a test
compares them with the installed libraries, so a pin change that adds or removes a name fails the suite
instead of letting `mirrorflow validate` reject a valid key or wave through one librdkafka refuses.
"""

from __future__ import annotations

from importlib import resources


def _names(filename: str) -> dict[str, str]:
    """{name: rest of its line} of a `# comment`-headed table, one name per line."""
    text = resources.files("mirrorflow.config").joinpath(filename).read_text(encoding="utf-8")
    rows = (line.split(maxsplit=1) for line in text.splitlines() if line.strip() and not line.startswith("#"))
    return {row[0]: (row[1] if len(row) > 1 else "") for row in rows}


LIBRDKAFKA_SCOPES: dict[str, str] = _names("librdkafka_properties.txt")
"""librdkafka property → where it applies: `*` every client, `C` consumers, `P` producers."""
LIBRDKAFKA_KEYS: frozenset[str] = frozenset(LIBRDKAFKA_SCOPES)
JAVA_CLIENT_KEYS: frozenset[str] = frozenset(_names("java_client_keys.txt"))
