"""Progress records: topic name, exact bytes, round trips, and clear errors for foreign records."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.core.progress import (
    Progress,
    decode_progress,
    decode_progress_key,
    encode_progress,
    encode_progress_key,
    progress_topic,
    topic_id_bytes,
    topic_id_text,
)

INT64 = st.integers(0, 2**63 - 1)


def test_topic_name_follows_the_internal_separator() -> None:
    assert progress_topic("primary") == "mirrorflow-progress.primary.internal"
    assert progress_topic("primary", "_") == "mirrorflow-progress_primary_internal"
    with pytest.raises(ValueError):
        progress_topic("")


SOURCE_ID = "AAAAAAAAAHsAAAAAAAAByA"  # Uuid(123, 456) as Kafka prints it
REMOTE_ID = "_____________________w"  # all ones but the zero UUID's neighbour: URL-safe characters


def test_exact_bytes() -> None:
    p = Progress("orders", 3, 1234, 1199, 1000, 2, 1700000000000, SOURCE_ID, REMOTE_ID, 64, 1699999999000)
    key, value = encode_progress(p)
    assert key.hex() == "00066f72646572730000" + "0003"
    assert value.hex() == (
        "0001"  # version
        + "00000000000004d2"  # next upstream offset
        + "00000000000004af"  # downstream end
        + "00000000000003e8"  # records copied
        + "00000002"  # epoch
        + "0000018bcfe56800"  # timestamp ms
        + "000000000000007b00000000000001c8"  # source topic ID
        + "ff" * 15
        + "ff"  # remote topic ID
        + "00000040"  # settled slots (optional: see below)
        + "0000018bcfe56418"  # run started ms (optional, after settled slots)
    )
    assert len(value) == 82
    assert decode_progress(key, value) == p
    assert decode_progress(key, value + b"\x01\x02") == p  # later fields of the same version: ignored
    assert decode_progress(key, value[:70]).settled_slots == 0  # a writer that did not know the field
    assert decode_progress(key, value[:74]) == replace(p, run_started_ms=0)  # nor the run's start: not known


def test_unknown_topic_ids_are_the_zero_uuid() -> None:
    key, value = encode_progress(Progress("orders", 0, 1, 1, 1, 0, 0))
    assert value[-44:-12] == bytes(32)
    assert decode_progress(key, value).source_topic_id == ""


def test_version_0_records_of_the_previous_release_still_decode() -> None:
    """The exact value today's release writes (38 bytes, no IDs): decoded with unknown IDs, so the copy's next
    commit upgrades it by recording the current ones."""
    key = encode_progress_key("orders", 3)
    value = bytes.fromhex(
        "0000" + "00000000000004d2" + "00000000000004af" + "00000000000003e8" + "00000002" + "0000018bcfe56800"
    )
    assert decode_progress(key, value) == Progress("orders", 3, 1234, 1199, 1000, 2, 1700000000000, "", "")


def test_records_of_the_previous_release_decode_as_not_settled_and_it_reads_ours() -> None:
    """The value the release before `settled_slots` wrote (70 bytes): decoded with settled_slots 0, so the next
    copy start reads the partition's whole chain of slots. That release reads our 74 bytes too: it checks the
    version (still 1) and the length it knows, and ignores the rest (a rollback keeps every progress readable)."""
    key = encode_progress_key("orders", 3)
    value = bytes.fromhex(
        "0001"
        + "00000000000004d2"
        + "00000000000004af"
        + "00000000000003e8"
        + "00000002"
        + "0000018bcfe56800"
        + "000000000000007b00000000000001c8"
        + "ff" * 16
    )
    decoded = decode_progress(key, value)
    assert decoded == Progress("orders", 3, 1234, 1199, 1000, 2, 1700000000000, SOURCE_ID, REMOTE_ID)
    assert decoded.settled_slots == 0
    ours = encode_progress(replace(decoded, settled_slots=8))[1]
    assert ours[:70] == value and len(ours) == 82


@pytest.mark.parametrize(
    "topic_id",
    [
        "AAAAAAAAAAAAAAAAAAAAAA",  # the zero UUID
        "short",
        "not base64 at all!!!!!",
        "AAAAAAAAAHsAAAAAAAAByAAA",  # too long
        "OI6UnZycQMS6xYg6JKz+xA",  # standard base64 (confluent-kafka's str): not Kafka's form
        "AAAAAAAAAHsAAAAAAAAByB",  # trailing bits set: not a canonical encoding of 16 bytes
    ],
)
def test_malformed_topic_ids_are_rejected(topic_id: str) -> None:
    with pytest.raises(ValueError):
        Progress("t", 0, 0, 0, 0, 0, 0, topic_id)


@given(raw=st.binary(min_size=16, max_size=16).filter(any))
def test_topic_id_text_round_trip(raw: bytes) -> None:
    text = topic_id_text(raw)
    assert len(text) == 22 and topic_id_bytes(text) == raw


@given(
    topic=st.text(min_size=1, max_size=60),
    partition=st.integers(0, 2**31 - 1),
    next_upstream=INT64,
    downstream_end=INT64,
    copied=INT64,
    epoch=st.integers(0, 2**31 - 1),
    timestamp=st.integers(-(2**63), 2**63 - 1),
    settled=st.integers(0, 2**31 - 1),
)
def test_round_trip(
    topic: str,
    partition: int,
    next_upstream: int,
    downstream_end: int,
    copied: int,
    epoch: int,
    timestamp: int,
    settled: int,
) -> None:
    p = Progress(topic, partition, next_upstream, downstream_end, copied, epoch, timestamp, settled_slots=settled)
    key, value = encode_progress(p)
    assert key == encode_progress_key(topic, partition)
    assert decode_progress_key(key) == (topic, partition)
    assert decode_progress(key, value) == p


@pytest.mark.parametrize(
    "fields",
    [
        ("", 0, 0, 0, 0, 0, 0),
        ("t", -1, 0, 0, 0, 0, 0),
        ("t", 0, -1, 0, 0, 0, 0),
        ("t", 0, 0, 2**63, 0, 0, 0),
        ("t", 0, 0, 0, 0, 2**31, 0),
    ],
)
def test_out_of_range_fields_are_rejected(fields: tuple[str, int, int, int, int, int, int]) -> None:
    with pytest.raises(ValueError):
        Progress(*fields)
    with pytest.raises(ValueError):
        Progress("t", 0, 0, 0, 0, 0, 0, settled_slots=-1)


def test_foreign_records_are_reported_clearly() -> None:
    key, value = encode_progress(Progress("orders", 0, 1, 1, 1, 0, 0))
    with pytest.raises(MirrorflowError, match=r"version 7.*reads version 1.*upgrade Mirrorflow"):
        decode_progress(key, b"\x00\x07" + value[2:])
    with pytest.raises(MirrorflowError, match="truncated"):
        decode_progress(key, value[:69])
    with pytest.raises(MirrorflowError, match="settled_slots"):
        decode_progress(key, value[:70] + (-1).to_bytes(4, "big", signed=True))
    with pytest.raises(MirrorflowError, match="truncated"):
        decode_progress_key(key[:-1])
    with pytest.raises(MirrorflowError, match="UTF-8"):
        decode_progress_key(b"\x00\x01\xff\x00\x00\x00\x00")
    negative = value[:2] + (-5).to_bytes(8, "big", signed=True) + value[10:]
    with pytest.raises(MirrorflowError, match="next_upstream"):
        decode_progress(key, negative)
