"""What the parts of a flow's config that are read in their own modules (the transform chain, the schema
registries) need of the flow builder's resolver.

Its own module so those parts depend on the protocol, not on each other: the chain ends with the registries' step,
and the registries read through the same resolver.
"""

from __future__ import annotations

from typing import Protocol

from mirrorflow.config.issues import IssueLog
from mirrorflow.config.precedence import Entries


class Reader(Protocol):
    """Composed entries (value, raw key), resolved values, the origin (file and line) of a key, and the log that
    problems go to."""

    entries: Entries
    log: IssueLog

    def value(self, key: str) -> str | None: ...

    def origin(self, key: str) -> str: ...
