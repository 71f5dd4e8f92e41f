"""Pure parts of the runbook's edge cases (issue 18): which group positions are stale, which positions of an
identity-named topic are copies of the other cluster's records, and the bounded wait for open transactions."""

from __future__ import annotations

from typing import Any

import pytest

from mirrorflow.core.errors import UsageError
from mirrorflow.core.offset_map import OffsetMap
from mirrorflow.replication.failover.fencing import wait_for_open_transactions
from mirrorflow.replication.failover.group_offsets import on_a_copy, split_stale
from mirrorflow.replication.failover.runbook import FailoverOptions, options_from_values
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
