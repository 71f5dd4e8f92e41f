"""An exclusive advisory lock between processes on one machine, for builds and caches that several commands share.

It lives in core (standard library only) because both the test-cluster launcher (`mirrorflow.local`) and the
Spark executor-env builder (`mirrorflow.spark.packaging`) serialise on it; neither should import the other.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path` (created with its folder) for the block; not re-entrant: never nest two
    on one path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
