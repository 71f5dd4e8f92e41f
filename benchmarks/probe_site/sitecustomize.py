"""Phase marks inside the Spark job of the deployed path (`bench_deployed.py --probe EVENTS`, issue 19).

Python runs a `sitecustomize` found on PYTHONPATH at start-up. This one does nothing unless
MIRRORFLOW_PROBE_EVENTS names a file and the process is PySpark's worker daemon (whose forked workers run the
copy): then it installs `handover_probe`'s marks, so a run boundary on the deployed path can be put on one time
line as `profile_handover.py` does in-process. Each Spark task's marks carry its run's start (`run=`, the last
six digits of `run_started_ms`), and the task's start and end are marked too. The product's code is untouched.
"""

from __future__ import annotations

import os
import sys

_EVENTS = os.environ.get("MIRRORFLOW_PROBE_EVENTS", "")
_DAEMON = any("pyspark.daemon" in arg or "pyspark.worker" in arg for arg in getattr(sys, "orig_argv", []))

if _EVENTS and _DAEMON:
    import functools
    from typing import Any

    import handover_probe
    import mirrorflow.replication.copy_group as copy_group_mod

    handover_probe.install(-1, open(_EVENTS, "a"))  # noqa: SIM115 - lives as long as the daemon and its forks
    _copy_ranges = copy_group_mod.copy_ranges

    @functools.wraps(_copy_ranges)
    def _marked(tasks: Any) -> Any:
        handover_probe._run = int(tasks[0].run_started_ms) % 1_000_000 if tasks else -1
        parts = ",".join(str(t.partition) for t in tasks)
        handover_probe.mark("-", "task.start", f"pid={os.getpid()} partitions={parts}")
        try:
            return _copy_ranges(tasks)
        finally:
            handover_probe.mark("-", "task.end", f"pid={os.getpid()}")

    copy_group_mod.copy_ranges = _marked
