"""Why a read to the true end (`compacted_log`) stopped: the errors it raises and the diagnosis it gives."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from mirrorflow.core.errors import MirrorflowError


class StalledReadError(MirrorflowError):
    """A read to the true end made no progress for its wait bound."""


class OpenTransactionError(StalledReadError):
    """A read to the true end stayed blocked by a transaction that neither committed nor aborted."""


def blocked(
    cluster: str,
    topic: str,
    pending: Mapping[int, int],
    reached: Mapping[int, int],
    wait_s: float,
    stable_below: Collection[int],
    notices: Sequence[str] = (),
) -> StalledReadError:
    """Blame an open transaction only where the reader met one: its end of partition at a last stable offset
    below the end (then that offset is the open transaction's first, what `kafka-transactions.sh abort` needs)."""
    held = "; ".join(f"{topic}-{p} at offset {reached[p]} (its end is {end})" for p, end in sorted(pending.items()))
    waited = f"reading {topic} on cluster '{cluster}' to its end made no progress for {wait_s:.0f} s"
    open_held = sorted(p for p in pending if p in stable_below)
    if not open_held:
        return StalledReadError(
            f"{waited}: the broker delivered nothing more for {held}, and no open transaction was seen there"
            f"{''.join(f' (the client last reported: {n})' for n in notices[-1:])}. "
            f"Check that the partition has a leader and that cluster '{cluster}' is reachable from here "
            f"(kafka-topics.sh --bootstrap-server <{cluster}> --describe --topic {topic}), then run this again. "
            f"Nothing was read past it."
        )
    first = open_held[0]
    return OpenTransactionError(
        f"{waited}: a transaction that is still open holds {held}. Its writer (a copy task that was killed, hangs "
        f"or is partitioned away) neither committed nor aborted it, and what follows it cannot be read yet. Kafka "
        f"aborts it once the writer's transaction.timeout.ms has passed (60 s for Mirrorflow's copies): run this "
        f"again then. To see the writer: kafka-transactions.sh --bootstrap-server <{cluster}> describe-producers "
        f"--topic {topic} --partition {first}; to abort it now (only if that writer is gone for good): "
        f"kafka-transactions.sh --bootstrap-server <{cluster}> abort --topic {topic} --partition {first} "
        f"--start-offset {reached[first]}. Nothing was read past it."
    )
