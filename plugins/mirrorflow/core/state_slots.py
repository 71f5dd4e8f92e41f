"""Where a source partition's replication state lives: its slot, one partition of each state topic.

The progress, offset-map and metrics topics of a flow have N partitions (N a power of two). The state of source
partition (topic, p) is written to partition `crc32(topic, p) mod N` of each, its head slot, so that a copy task
reads only the slots of the partitions it owns, whatever the size of the flow (issue 17: every task used to read
the whole one-partition topics, O(partitions of the flow) per task and O(partitions²) per run).

N only grows (Kafka never removes partitions), and only by doubling: `flow_state_partitions` asks for the next
power of two, so a topic of N partitions becomes one of 2^k·N. The head slot at 2N is the head slot at N or that
plus N, so the slots a partition's state ever had form its chain: h mod N, h mod N/2, ..., h mod 1, each one no
higher than the one before. The topics Mirrorflow created before slots had one partition: N = 1, every
partition's chain ends at slot 0, and that layout is the first step of the same chain, not a special case.

The rules every reader and writer follows:
- a writer writes only to the head slot of the topic's current N;
- the state of a partition is the one in the highest slot of its chain that holds any (a writer with a smaller N
  wrote before the topic grew, or is a zombie that fencing stops);
- a copy that finds its state below its head moves it there at its first commit and tombstones it where it was
  (`replication.state_slots`), so the old slots shrink back to their own partitions.
stdlib only: the Spark executors and every reader compute the same slot.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import TypeVar

from mirrorflow.core.errors import MirrorflowError

MIN_STATE_PARTITIONS = 4
"""Even a small flow gets a few slots: the same code path at every size, and room to grow before the first move."""
MAX_STATE_PARTITIONS = 4096
"""The default cap on each state topic's partitions (three topics per flow on the target;
`mirrorflow.state.partitions.max`). At 100,000 partitions a slot then holds about 24 partitions' state, three
times the state bytes per copy task of a 10,000-partition flow; 16,384 keeps them flat up to 131,072 partitions,
but every client reading a state topic fetches its metadata, about 42 bytes per partition, and existing topics
would grow at the upgrade: docs/scaling.md item 1 weighs both."""
PARTITIONS_PER_SLOT = 8
"""The flow's partitions per slot that the sizing aims at: what one copy range reads at its start."""

T = TypeVar("T")


def slot_hash(topic: str, partition: int) -> int:
    """A stable hash of a source partition (CRC-32: the same in every process and Python version)."""
    return zlib.crc32(topic.encode("utf-8") + b"\x00" + str(partition).encode("ascii"))


def check_count(count: int, topic: str) -> int:
    """`count`, if it is a partition count the slot rules hold for (a power of two), else a clear error."""
    if count < 1 or count & (count - 1):
        raise MirrorflowError(
            f"the state topic '{topic}' has {count} partitions, but Mirrorflow's state topics must have a power of "
            "two (1, 2, 4, ...): was it created or grown by hand? Grow it to the next power of two "
            f"(kafka-topics.sh --alter --topic {topic} --partitions <n>) and run the flow again; nothing was read."
        )
    return count


def head_slot(topic: str, partition: int, count: int) -> int:
    """The slot the state of (topic, partition) is written to in a state topic of `count` partitions."""
    return slot_hash(topic, partition) % count


def slot_chain(topic: str, partition: int, count: int) -> list[int]:
    """Every slot the state of (topic, partition) may have been written to while the topic grew to `count`
    partitions by doubling, newest first: the head, then the heads of every smaller power of two."""
    h, n = slot_hash(topic, partition), count
    chain: list[int] = []
    while n >= 1:
        slot = h % n
        if not chain or chain[-1] != slot:
            chain.append(slot)
        n //= 2
    return chain


def newest(found: Mapping[int, T]) -> T | None:
    """Of the records of one partition found in several slots of its chain, the one in the highest slot."""
    return found[max(found)] if found else None


SLOTS_ON = True
"""Whether flows get more than one slot. Off: an adversarial review of the move (a partition's state found below
its head) found translations labelled exact that skip records when a move is seen or left half done (docs/
state-plan.md lists the findings and the fixes). With it off every state topic keeps one partition, every
chain is [0], nothing moves, and the code reads and writes exactly as before the slots."""


def flow_state_partitions(flow_partitions: int, cap: int = MAX_STATE_PARTITIONS) -> int:
    """The partitions each state topic of a flow of `flow_partitions` source partitions should have: 1 while
    `SLOTS_ON` is off, else `sized_state_partitions`."""
    return sized_state_partitions(flow_partitions, cap) if SLOTS_ON else 1


def sized_state_partitions(flow_partitions: int, cap: int = MAX_STATE_PARTITIONS) -> int:
    """A power of two with about `PARTITIONS_PER_SLOT` of the flow's partitions per slot, at least
    `MIN_STATE_PARTITIONS` and at most `cap` (a power of two: `mirrorflow.state.partitions.max`)."""
    wanted = max(-(-flow_partitions // PARTITIONS_PER_SLOT), MIN_STATE_PARTITIONS)
    count = 1
    while count < wanted:
        count *= 2
    return min(count, 1 << (max(cap, MIN_STATE_PARTITIONS).bit_length() - 1))  # a cap rounded down to a power of 2
