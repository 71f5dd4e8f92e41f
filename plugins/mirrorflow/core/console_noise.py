"""What counts as noise on Mirrorflow's console: lines a user cannot tell from a problem.

* a raw librdkafka line (`%3|1700000000.123|FAIL|rdkafka#producer-1| ...`): written by a client made without
  Mirrorflow's logger, from librdkafka's own threads, past every Python filter;
* a deprecation warning of a library (Airflow, Spark, pydantic, ...) that Mirrorflow's calls set off;
* Spark's log4j banner and INFO lines (`Using Spark's default log4j profile`, `25/01/01 12:00:00 INFO ...`).

`make demo` checks its own output with `noise_lines` and fails on any (`mirrorflow.cli.demo`); the console test
(tests/cli/test_console_quiet.py) runs the same check on the noisy paths one by one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_PATTERNS = {
    "raw librdkafka line": re.compile(r"^%\d\|\d+\.\d+\|"),
    "deprecation warning": re.compile(r"DeprecationWarning|PendingDeprecationWarning|\bdeprecated\b", re.IGNORECASE),
    "Spark log4j banner": re.compile(r"Using Spark's default log4j profile|Setting default log level to"),
    "Spark INFO line": re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d INFO "),
}


def noise_kind(line: str) -> str | None:
    """The kind of noise `line` is (after removing terminal colour codes), or None for a line meant for users."""
    plain = _ANSI.sub("", line).strip()
    for kind, pattern in _PATTERNS.items():
        if pattern.search(plain):
            return kind
    return None


def noise_lines(lines: Iterable[str]) -> list[tuple[str, str]]:
    """(kind, line) of every noisy line, in order."""
    found = []
    for line in lines:
        kind = noise_kind(line)
        if kind is not None:
            found.append((kind, line.rstrip("\n")))
    return found
