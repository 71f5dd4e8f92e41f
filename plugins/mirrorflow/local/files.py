"""Where a local cluster keeps its files: path attributes derived from a directory attribute.

A broker's or a security setup's files all live in one directory; `FileIn` names each one once, next to the
directory attribute it hangs from, instead of a property per file.
"""

from __future__ import annotations

from pathlib import Path


class FileIn:
    """A read-only attribute: the file `name` inside the path the instance holds in its attribute `directory`."""

    def __init__(self, directory: str, name: str) -> None:
        self._directory = directory
        self._name = name

    def __get__(self, instance: object, owner: type | None = None) -> Path:
        return Path(getattr(instance, self._directory)) / self._name
