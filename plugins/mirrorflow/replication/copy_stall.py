"""The bound on an interval copy that stops moving short of its end (the failover drain's guard): its error."""

from __future__ import annotations

from mirrorflow.core.errors import MirrorflowError
from mirrorflow.replication.copy_task import CopyTask


class CopyStalled(MirrorflowError):
    """An interval copy read nothing for `idle_limit_s` while short of its end."""


def stalled_message(task: CopyTask, at: int, idle_s: float) -> str:
    """Why an interval copy gave up short of its end, and what to do."""
    if task.read_committed:
        why = "a source transaction still open below the end holds the read_committed reader back"
    else:
        why = "the source did not deliver the records below the end"
    return (
        f"flow {task.flow}: copying {task.topic}-{task.partition} read nothing for {idle_s:g} s at offset {at}, "
        f"short of its end {task.end} ({why}). Nothing was lost: what was copied is committed with its "
        "progress. End or wait for the source transaction (or check the source cluster), then run again."
    )
