"""Reading mm2.properties exactly as MM2 (java.util.Properties) does, while remembering where each key was.

jproperties parses the values (it follows java.util.Properties: `=`, `:` or whitespace separators, `\\`
continuations, `#`/`!` comments, escapes), but it does not expose line numbers, so a small pre-scan of the
logical lines maps every key back to the line it starts on. The pre-scan also keeps the raw value text, which
is how a regex that lost its backslashes to properties escaping is detected.

jproperties reads character by character (~30 s for a 7 MB value), so only lines holding a backslash (escapes,
continuations) go through it; on the others the pre-scan's raw value already is the final value.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from jproperties import ParseError, Properties

from mirrorflow.config.issues import IssueLog

_NATURAL_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_WHITESPACE = " \t\f"
_SIMPLE_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


@dataclass(frozen=True)
class PropertiesFile:
    """The parsed file: final values (the last occurrence of a key wins) and where each key was written."""

    path: str
    values: dict[str, str]
    lines: dict[str, int] = field(default_factory=dict)
    raw_values: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _LogicalLine:
    line: int
    key: str
    raw_value: str
    plain: bool  # one physical line without a backslash: no escape can change its key or value


def read_properties(path: str | Path, log: IssueLog) -> PropertiesFile | None:
    """Parse `path`; problems go to `log` (an unreadable file yields None, other problems still parse)."""
    name = str(path)
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        log.error("", "file not found", "check the path of the mm2.properties file")
        return None
    except OSError as err:
        log.error("", f"cannot read the file ({err.strerror})", "check the path and its permissions")
        return None
    text = _decode(data, log)
    comment_lines: set[int] = set()
    logical = list(_logical_lines(text, comment_lines))
    lines: dict[str, int] = {}
    raw_values: dict[str, str] = {}
    plain: dict[str, bool] = {}
    for entry in logical:
        if entry.key in lines:
            log.warn(
                entry.key,
                f"repeated key: this value replaces the one on line {lines[entry.key]} (the last one wins)",
                "delete one of the two lines",
                line=entry.line,
            )
        lines[entry.key] = entry.line
        raw_values[entry.key] = entry.raw_value
        plain[entry.key] = entry.plain
    log.line_of.update(lines)
    blank = comment_lines | {entry.line for entry in logical if entry.plain}
    parsed = _parse_values(_blank_lines(text, blank), log)
    # A key's last occurrence decides: plain -> its raw value; escaped -> jproperties' (the last it saw).
    values = {key: raw_values[key] if plain[key] else parsed[key] for key in lines if plain[key] or key in parsed}
    values.update({key: value for key, value in parsed.items() if key not in values})
    return PropertiesFile(name, values, lines, raw_values)


def lost_escapes(raw_value: str) -> list[str]:
    """Backslash sequences that properties escaping turns into the bare character (`\\.` is read as `.`)."""
    lost: list[str] = []
    i = 0
    while i < len(raw_value):
        if raw_value[i] == "\\" and i + 1 < len(raw_value):
            nxt = raw_value[i + 1]
            if nxt not in "\\tnrfu" and f"\\{nxt}" not in lost:
                lost.append(f"\\{nxt}")
            i += 2
            continue
        i += 1
    return lost


def _decode(data: bytes, log: IssueLog) -> str:
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    for number, raw_line in enumerate(data.split(b"\n"), start=1):
        try:
            raw_line.decode("utf-8")
        except UnicodeDecodeError as err:
            log.error(
                "",
                f"byte 0x{raw_line[err.start]:02x} at column {err.start + 1} is not valid UTF-8",
                "save the file as UTF-8, or write non-ASCII characters as \\uXXXX escapes",
                line=number,
            )
    return data.decode("utf-8", errors="replace")


def _ends_with_continuation(text: str) -> bool:
    return (len(text) - len(text.rstrip("\\"))) % 2 == 1


def _logical_lines(text: str, comment_lines: set[int]) -> Iterator[_LogicalLine]:
    natural = _NATURAL_LINE_BREAK.split(text)
    i = 0
    while i < len(natural):
        start = i + 1
        current = natural[i].lstrip(_WHITESPACE)
        i += 1
        if not current:
            continue
        if current[0] in "#!":
            comment_lines.add(start)
            continue
        while _ends_with_continuation(current):
            current = current[:-1]
            if i >= len(natural):
                break
            current += natural[i].lstrip(_WHITESPACE)
            i += 1
        key, raw_value = _split_key(current)
        yield _LogicalLine(start, key, raw_value, plain=i == start and "\\" not in natural[start - 1])


def _split_key(logical: str) -> tuple[str, str]:
    """Key (escapes applied) and the raw text of the value, following java.util.Properties' rules."""
    key: list[str] = []
    i = 0
    while i < len(logical):
        c = logical[i]
        if c == "\\" and i + 1 < len(logical):
            nxt = logical[i + 1]
            if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", logical[i + 2 : i + 6]):
                key.append(chr(int(logical[i + 2 : i + 6], 16)))
                i += 6
                continue
            key.append(_SIMPLE_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        if c in _WHITESPACE or c in "=:":
            break
        key.append(c)
        i += 1
    rest = logical[i:].lstrip(_WHITESPACE)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(_WHITESPACE)
    return "".join(key), rest


def _blank_lines(text: str, numbers: set[int]) -> str:
    """Empty out comment lines: jproperties reads `#:` comments as metadata, Java ignores them."""
    if not numbers:
        return text
    parts = _NATURAL_LINE_BREAK.split(text)
    return "\n".join("" if n in numbers else part for n, part in enumerate(parts, start=1))


def _parse_values(text: str, log: IssueLog) -> dict[str, str]:
    props = Properties()
    try:
        props.load(text, encoding=None)
    except ParseError as err:
        log.error("", f"cannot parse the line: {err.message}", "fix the escape sequence", line=err.line_number)
        return {}
    return {key: props[key].data for key in props}
