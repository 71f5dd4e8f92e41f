"""Problems found in a config file, each pinned to file, line and key, so the operator fixes them in one pass.

Validation never stops at the first problem: every check appends to an `IssueLog`, and the loader raises one
`ConfigError` holding all errors at the end. Warnings travel with the loaded config instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from mirrorflow.core.errors import UsageError

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Issue:
    """One problem: where it is (file, line, key), what is wrong, and what to do about it."""

    file: str
    line: int | None
    key: str
    problem: str
    fix: str = ""
    severity: Severity = "error"

    def render(self) -> str:
        """`FILE:LINE: KEY: problem. fix` — the format editors and CI logs can jump to."""
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        head = f"{where}: {self.key}" if self.key else where
        text = f"{head}: {_sentence(self.problem)}"
        if self.fix:
            fix = _sentence(self.fix)
            text += f" {fix[0].upper()}{fix[1:]}"
        return text


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith((".", "?", "!")) else text + "."


_MAX_PROBLEM = 1000


def _shorten(text: str) -> str:
    """A problem quoting a megabyte-long value stays readable: keep both ends, say how much was cut."""
    if len(text) <= _MAX_PROBLEM:
        return text
    cut = len(text) - 800
    return f"{text[:600]}... [{cut:,} characters omitted] ...{text[-200:]}"


class ConfigError(UsageError):
    """The config file has errors; `issues` lists every one of them (warnings are not included)."""

    def __init__(self, issues: list[Issue]) -> None:
        self.issues = list(issues)
        super().__init__("\n".join(issue.render() for issue in self.issues))


@dataclass
class IssueLog:
    """Collects issues for one file; duplicates (the same top-level key seen by many flows) are kept once."""

    file: str
    line_of: dict[str, int] = field(default_factory=dict)
    issues: list[Issue] = field(default_factory=list)
    _seen: set[tuple[str, int | None, str, str]] = field(default_factory=set)

    def add(
        self,
        key: str,
        problem: str,
        fix: str = "",
        *,
        severity: Severity = "error",
        line: int | None = None,
    ) -> None:
        """Record an issue on `key`; its line is looked up unless given."""
        if line is None:
            line = self.line_of.get(key)
        problem = _shorten(problem)
        marker = (severity, line, key, problem)
        if marker in self._seen:
            return
        self._seen.add(marker)
        self.issues.append(Issue(self.file, line, key, problem, fix, severity))

    def error(self, key: str, problem: str, fix: str = "", *, line: int | None = None) -> None:
        self.add(key, problem, fix, severity="error", line=line)

    def warn(self, key: str, problem: str, fix: str = "", *, line: int | None = None) -> None:
        self.add(key, problem, fix, severity="warning", line=line)

    @property
    def errors(self) -> list[Issue]:
        return sorted((i for i in self.issues if i.severity == "error"), key=lambda i: (i.line is None, i.line or 0))

    @property
    def warnings(self) -> list[Issue]:
        return sorted((i for i in self.issues if i.severity == "warning"), key=lambda i: (i.line is None, i.line or 0))

    def raise_if_errors(self) -> None:
        if self.errors:
            raise ConfigError(self.errors)
