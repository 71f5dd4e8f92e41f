"""The origin header that makes active/active loop-proof under IdentityReplicationPolicy (docs/design.md §1.6).

Identity keeps topic names, so MM2's name-based cycle check cannot see that a record came back to the cluster
it started on. With `mirrorflow.provenance.headers=true` every copied record carries the alias of the cluster
it was first written to:
* a record without the header gets `mirrorflow.origin = <source alias>` (UTF-8) when copied;
* a record that already has one keeps it (its origin is further upstream);
* a record whose origin is the copy's target is dropped: writing it there would start the loop.
Headers are otherwise untouched, in order, so the rest of the record is copied 1:1 as MM2 does.
"""

from __future__ import annotations

from collections.abc import Sequence

ORIGIN_HEADER = "mirrorflow.origin"

Header = tuple[str, bytes | None]


def origin(headers: Sequence[Header] | None) -> str | None:
    """The origin alias of a record, or None if it has no origin header (first one wins, as it was first)."""
    for key, value in headers or ():
        if key == ORIGIN_HEADER:
            return None if value is None else bytes(value).decode("utf-8", errors="replace")
    return None


def should_drop(headers: Sequence[Header] | None, target_alias: str) -> bool:
    """True if the record started on `target_alias`: copying it there would close a cycle."""
    return origin(headers) == target_alias


def with_origin(headers: Sequence[Header] | None, source_alias: str) -> list[Header]:
    """The headers to write downstream: unchanged if an origin is present, else with `source_alias` appended."""
    copied = list(headers or ())
    if not any(key == ORIGIN_HEADER for key, _ in copied):
        copied.append((ORIGIN_HEADER, source_alias.encode("utf-8")))
    return copied
