"""Parsing one value the way Kafka's ConfigDef does (BOOLEAN, INT, LONG, SHORT, LIST, enums)."""

from __future__ import annotations

import re

from mirrorflow.config.keys import KeySpec

_INT_RANGES = {"short": (-(2**15), 2**15 - 1), "int": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}
_JAVA_INT = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


class ValueProblem(ValueError):
    """A value that does not parse; `fix` says what to write instead."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.fix = fix


def _comment_hint(value: str) -> str:
    if "#" in value or "//" in value:
        return "; .properties files have no end-of-line comments, put the comment on its own line after #"
    return ""


def parse_bool(key: str, value: str) -> bool:
    """ConfigDef BOOLEAN: `true`/`false` in any case, surrounding whitespace ignored; nothing else."""
    trimmed = value.strip()
    if trimmed.lower() == "true":
        return True
    if trimmed.lower() == "false":
        return False
    shown = "an empty value" if not trimmed else f"{trimmed!r}"
    raise ValueProblem(f"expected true or false, found {shown}", f"write {key} = true or {key} = false" +
                       _comment_hint(value))  # fmt: skip


def parse_int(key: str, value: str, kind: str = "long") -> int:
    trimmed = value.strip()
    low, high = _INT_RANGES.get(kind, _INT_RANGES["long"])
    if not _JAVA_INT.fullmatch(trimmed):
        shown = "an empty value" if not trimmed else f"{trimmed!r}"
        raise ValueProblem(f"expected a whole number, found {shown}", f"write a number, e.g. {key} = 60" +
                           _comment_hint(value))  # fmt: skip
    number = int(trimmed)
    if not low <= number <= high:
        raise ValueProblem(f"{number} is out of range for a {kind}", f"use a value between {low} and {high}")
    return number


def parse_double(key: str, value: str) -> float:
    """ConfigDef DOUBLE, finite only: `30`, `0.5`, `1e3` (no `NaN`/`Infinity`, which no target can mean)."""
    trimmed = value.strip()
    if not _DECIMAL.fullmatch(trimmed):
        shown = "an empty value" if not trimmed else f"{trimmed!r}"
        raise ValueProblem(f"expected a number, found {shown}", f"write a number, e.g. {key} = 30" +
                           _comment_hint(value))  # fmt: skip
    return float(trimmed)


def parse_enum(key: str, value: str, choices: tuple[str, ...], case_insensitive: bool) -> str:
    trimmed = value.strip()
    for choice in choices:
        if trimmed == choice or (case_insensitive and trimmed.lower() == choice.lower()):
            return choice
    options = ", ".join(choices)
    raise ValueProblem(f"{trimmed!r} is not one of {options}", f"set {key} to one of {options}" +
                       _comment_hint(value))  # fmt: skip


def check(spec: KeySpec, key: str, value: str) -> None:
    """Raise ValueProblem when `value` does not parse as `spec` says (lists and strings always parse)."""
    if spec.type == "bool":
        parse_bool(key, value)
    elif spec.type in ("int", "long", "short"):
        parse_int(key, value, spec.type)
    elif spec.type == "double":
        parse_double(key, value)
    elif spec.type == "enum":
        parse_enum(key, value, spec.choices, spec.case_insensitive)
