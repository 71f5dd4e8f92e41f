"""The registry answers schema-ID translation keeps for the life of the process, bounded (least recently used out).

A copy range (one source partition in one run) used to start with empty caches, so every partition of every run
asked both registries again for every schema it met: 3 or more HTTP calls per partition per schema per run. The
answers below do not change once given (an ID never names another schema; a registered schema keeps its target
ID), so they are kept per process instead: one Spark executor's Python worker (Spark reuses it from task to
task) or one Airflow task's process. The first range of a process pays the round trips, later ranges none.

Keys hold the registries' URLs, so flows to other registries never share an entry; credentials are never part
of a key or a value. Each map holds at most `CACHE_ENTRIES` entries (a few hundred bytes each: no schema text is
kept), so a process that meets ever new IDs stays bounded. What may change is cached with that in mind:
* an ID's subjects can grow (the same schema registered under one more subject reuses the ID): a subject
  missing from the cached set is looked up again before a record is judged not the registry's;
* a subject can be created at any time: only its existence is cached here, never its absence.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
CACHE_ENTRIES = 10_000
"""Entries per map. 10,000 IDs is more than most registries hold; the few hundred bytes an entry takes keep a
full map under ~5 MB."""


class Lru(Generic[K, V]):
    """A dict bounded to `size` entries that drops the least recently used first; safe across threads (the
    copy may run partitions on threads of one process)."""

    def __init__(self, size: int = CACHE_ENTRIES) -> None:
        if size < 1:
            raise ValueError(f"an LRU cache needs room for at least one entry, not {size}")
        self.size = size
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


ID_SUBJECTS: Lru[tuple[str, int], frozenset[str]] = Lru()
"""(source registry URL, schema ID) -> the subjects that ID is registered under there."""
TARGET_IDS: Lru[tuple[str, str, int], tuple[int, frozenset[str]]] = Lru()
"""(source URL, target URL, source ID) -> (the target's ID, the subjects it was registered under in the target)."""
TARGET_VERSIONS: Lru[tuple[str, str, str, int], int] = Lru()
"""(source URL, target URL, subject, source version) -> the version of that subject's schema in the target."""
SUBJECTS_SEEN: Lru[tuple[str, str], bool] = Lru()
"""(source URL, subject) -> True once the subject was seen to exist (never its absence: see the docstring)."""


def clear_all() -> None:
    """Forget every answer (tests; a process that learns its registries were wiped)."""
    for cache in (ID_SUBJECTS, TARGET_IDS, TARGET_VERSIONS, SUBJECTS_SEEN):
        cache.clear()
