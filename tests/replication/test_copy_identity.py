"""The copy's topic-identity rule without a cluster: which recorded/planned ID pairs stop the copy, which are
adopted, and when an idle partition must commit once to record them."""

from __future__ import annotations

import pytest

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.core.progress import Progress
from mirrorflow.replication.copy_setup import check_identity, identity_upgrade_pending, resolve_start
from mirrorflow.replication.copy_task import CopyTask

OLD, NEW, REMOTE, REMOTE2 = (
    "PmWrF9h3T-mF58aV5R5SEw",
    "cLnDwiOYR3yVx4gJOFpSKA",
    "yR3U_nZCQ1O7GAi5AK2_Aw",
    "3iXxREo_R224G6jV0NkCPw",
)


def task(source_id: str = "", remote_id: str = "") -> CopyTask:
    return CopyTask(
        flow="A->B",
        source="A",
        target="B",
        topic="orders",
        partition=2,
        remote_topic="A.orders",
        end=None,
        run_seconds=None,
        exactly_once=True,
        start_at_latest=False,
        transactional_id="t",
        progress_topic="mirrorflow-progress.A.internal",
        offset_map_topic="mirrorflow-offset-map.A.internal",
        offset_syncs_topic=None,
        offset_syncs_on_target=False,
        offset_lag_max=100,
        provenance=False,
        timeout_s=1.0,
        source_topic_id=source_id,
        remote_topic_id=remote_id,
    )


def progress(source_id: str = "", remote_id: str = "", next_upstream: int = 100) -> Progress:
    return Progress("orders", 2, next_upstream, next_upstream, next_upstream, 0, 0, source_id, remote_id)


def test_a_new_source_id_stops_the_copy_with_both_ids_and_the_reset_command() -> None:
    with pytest.raises(MirrorflowError) as stopped:
        check_identity(task(NEW, REMOTE), progress(OLD, REMOTE))
    message = str(stopped.value)
    assert "source topic 'orders' on 'A' was deleted and re-created" in message
    assert f"topic ID is {NEW}" in message and f"recorded for topic ID {OLD}" in message
    assert "mirrorflow reset CONFIG --flow 'A->B' --topic orders" in message


def test_a_new_remote_id_stops_the_copy() -> None:
    with pytest.raises(MirrorflowError, match=r"remote topic 'A\.orders' on 'B' was deleted and re-created"):
        check_identity(task(OLD, REMOTE2), progress(OLD, REMOTE))


@pytest.mark.parametrize(
    ("planned", "recorded", "written", "upgrade"),
    [
        ((OLD, REMOTE), (OLD, REMOTE), (OLD, REMOTE), False),  # same topics
        ((OLD, REMOTE), ("", ""), (OLD, REMOTE), True),  # a version-0 record: adopted, committed once
        (("", ""), (OLD, REMOTE), (OLD, REMOTE), False),  # unknown now (not describable): kept, not checked
        ((OLD, ""), (OLD, REMOTE), (OLD, REMOTE), False),
    ],
)
def test_unknown_ids_are_adopted_or_kept_never_compared(
    planned: tuple[str, str], recorded: tuple[str, str], written: tuple[str, str], upgrade: bool
) -> None:
    stored = progress(*recorded)
    assert check_identity(task(*planned), stored) == written
    assert identity_upgrade_pending(stored, written) is upgrade


def test_a_first_copy_records_the_planned_ids() -> None:
    assert check_identity(task(NEW, REMOTE), None) == (NEW, REMOTE)
    assert not identity_upgrade_pending(None, (NEW, REMOTE))


def test_a_shorter_source_points_at_the_reset_command() -> None:
    with pytest.raises(MirrorflowError, match=r"ends at 50 .* mirrorflow reset CONFIG --flow 'A->B' --topic orders"):
        resolve_start(task(), progress(next_upstream=100), 0, 50)
