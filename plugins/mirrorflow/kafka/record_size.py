"""What to tell an operator when a record is too large to copy: which limit refused it and which key raises it.

librdkafka refuses a record above its producer's `message.max.bytes` before sending it (1 MB by default, which
is why the copy's writer follows the remote topic's `max.message.bytes`); a broker refuses a record batch above
the topic's `max.message.bytes`. Either way Kafka only says "Message size too large".
"""

from __future__ import annotations

BROKER_TOO_LARGE_HINT = (
    "a record is larger than the remote topic accepts: raise the topic's max.message.bytes on the target "
    "(config sync copies the source topic's value unless config.properties.exclude skips it)"
)


def size_advice(cluster: str, size: int, *, operator_cap: bool, topic_limit: int | None) -> str:
    """Why a `size`-byte record was refused by the writer of target `cluster`, and what to raise."""
    if operator_cap:
        return (
            f"the limit is set by `{cluster}.producer.max.request.size` (librdkafka `message.max.bytes`): "
            f"raise it above {size}, or remove it so the copy follows the topic's max.message.bytes"
        )
    if topic_limit is not None:
        return f"the remote topic's max.message.bytes is {topic_limit}: {BROKER_TOO_LARGE_HINT}"
    return (
        "the remote topic's max.message.bytes could not be read, so librdkafka's 1 MB default applies: set "
        f"`{cluster}.producer.max.request.size` above {size}"
    )
