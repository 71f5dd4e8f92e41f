"""Pure parts of the runbook's edge cases (issue 18): which group positions are stale, which positions of an
identity-named topic are copies of the other cluster's records, and the bounded wait for open transactions."""

from __future__ import annotations

from typing import Any

import pytest

from mirrorflow.core.errors import UsageError
from mirrorflow.core.offset_map import OffsetMap
from mirrorflow.replication.failover.fencing import wait_for_open_transactions
from mirrorflow.replication.failover.group_offsets import both_origins, on_a_copy, split_stale
from mirrorflow.replication.failover.options import FailoverOptions, options_from_values
from mirrorflow.replication.offset_translation import FlowOffsetMaps


def _row(group: str, partition: int, status: str) -> dict[str, Any]:
    return {"group": group, "topic": "t", "partition": partition, "upstream_offset": 3, "status": status}


def test_a_group_with_one_stale_position_is_skipped_whole_and_the_others_kept() -> None:
    rows = [_row("ok", 0, "exact"), _row("old", 0, "exact"), _row("old", 1, "before-history")]
    movable, skipped = split_stale(rows)
    assert movable == [rows[0]]
    assert skipped == [{"group": "old", "topic": "t", "partition": 1, "upstream_offset": 3, "reason": "before-history"}]


def test_only_positions_on_copies_of_the_other_clusters_records_use_the_reverse_map() -> None:
    # The reverse flow copied its upstream 0-9 to downstream 0-9, its commit marker at 10; the topic's own
    # records follow from 11.
    reverse = OffsetMap(start=0)
    reverse.record_run(0, 0, 10)
    reverse.mark_consumed(10, downstream_end=11)
    maps = FlowOffsetMaps({("t", 0): reverse})
    assert [on_a_copy(maps, "t", 0, d) for d in (0, 4, 9, 10, 11, 15)] == [True] * 3 + [False] * 3
    assert not on_a_copy(maps, "t", 1, 4)  # no reverse copy of that partition


def test_a_same_named_topic_of_both_origins_resumes_at_the_smaller_candidate_and_never_skips() -> None:
    # B (the source of the failback) holds: A's 0-9 (copied), a marker at 10, B's own 11-20, A's 10-14 copied late
    # at 21-25, a marker at 26. A holds: its 0-14, then copies of B's 11-20 at 15-24, a marker at 25.
    forward = OffsetMap(start=11)  # B->A: B's own records
    forward.record_run(11, 15, 10)
    forward.mark_consumed(27, downstream_end=26)
    reverse = OffsetMap(start=0)  # A->B, kept on B
    reverse.record_run(0, 0, 10)
    reverse.record_run(10, 21, 5)
    reverse.mark_consumed(26, downstream_end=27)
    maps = FlowOffsetMaps({("t", 0): forward}), FlowOffsetMaps({("t", 0): reverse})
    # at B 11 (B's first record): A's 10-14 were not read yet, copies of B's records on A start at 15
    assert both_origins(*maps, "t", 0, 11) == (10, "exact")
    # at B 15: A's 10-14 unread, but on A they precede the copies of B 11-14 (read): re-read
    assert both_origins(*maps, "t", 0, 15) == (10, "re-read")
    assert both_origins(*maps, "t", 0, 4) == (4, "exact")
    assert both_origins(*maps, "t", 0, 27) == (26, "exact")
    # without the late copy, A's 10-14 are past everything the A->B copy read: still not skipped
    early = OffsetMap(start=0)
    early.record_run(0, 0, 10)
    early.mark_consumed(10, downstream_end=11)
    assert both_origins(maps[0], FlowOffsetMaps({("t", 0): early}), "t", 0, 11) == (10, "exact")


def test_the_open_transaction_wait_ends_when_they_close_or_at_its_bound() -> None:
    answers = iter([{("t", 0): 5}, {("t", 0): 5}, {}])
    slept: list[float] = []
    assert wait_for_open_transactions(lambda: ({}, next(answers)), 60, sleep=slept.append) == {}
    assert len(slept) == 2
    assert wait_for_open_transactions(lambda: ({}, {("t", 0): 5}), 0, sleep=slept.append) == {("t", 0): 5}


def test_the_new_options_come_from_the_cli_and_the_form_and_are_checked() -> None:
    values = {"primary": "A", "dr": "B", "strict_groups": True, "open_transaction_wait_seconds": 5}
    options = options_from_values(values, config="c", direction="failover", state_dir=None)
    assert (options.strict_groups, options.open_transaction_wait_seconds) == (True, 5.0)
    defaults = FailoverOptions(config="c", primary="A", dr="B")
    assert (defaults.strict_groups, defaults.open_transaction_wait_seconds) == (False, 60.0)
    with pytest.raises(UsageError, match="--open-transaction-wait-seconds -1: give 0 or more"):
        options_from_values({**values, "open_transaction_wait_seconds": -1}, config="c", direction="x", state_dir=None)
