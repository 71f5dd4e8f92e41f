r"""MM2's LIST values and include/exclude regexes (ConfigDef LIST parsing, `MirrorUtils.compilePatternList`).

Rules, as MM2 applies them (docs/mm2-reference.md §1.6):
* A LIST value is trimmed like Java's `String.trim()` (characters <= U+0020); an empty value has no items;
  otherwise it is split on `\s*,\s*`, keeping empty items. So a regex with a comma (`a{1,3}`) is cut in two.
* The items are joined with `|` into ONE Java regex, and a name must match all of it (`Matcher.matches`, our
  `fullmatch`). No items => no pattern: an include list matches nothing, an exclude list excludes nothing.
* The regexes are written in Java's dialect. We rewrite what Python spells differently (`\Q...\E`, `(?<name>`,
  `\k<name>`, `\0nnn`, `\x{h}`, `\e`, `\cX`, `\z`, `\Z`, mid-pattern `(?i)` whose scope runs to the end of the
  enclosing group even across `|`), compile with `re.ASCII` (Java's `\d \w \s \b` and `(?i)` are ASCII-only by
  default), and refuse what Python cannot express (`\p{..}`, `\h`, `\v`, `\R`, `\X`, `\G`, class union
  `[a[b]]` and intersection `&&`, flags `u U x`) instead of silently matching something else. Syntax Java
  rejects (`{` outside a repetition, `{,n}`, `(?P<..>`, `(?#..)`) is rejected here too.
* Known remaining difference: Java's `.` also stops at `\r`, U+0085, U+2028 and U+2029 (Python's only at
  `\n`); topic names cannot contain those characters.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import ClassVar, Self

from mirrorflow.core.errors import UsageError

_JAVA_TRIM = "".join(chr(c) for c in range(0x21))
_LIST_SEPARATOR = re.compile(r"\s*,\s*", re.ASCII)
_NAMED_GROUP = re.compile(r"\(\?<([a-zA-Z][a-zA-Z0-9]*)>")
_NAMED_BACKREFERENCE = re.compile(r"\\k<([a-zA-Z][a-zA-Z0-9]*)>")
_INLINE_FLAGS = re.compile(r"\(\?([idmsuxU]*)(?:-([idmsuxU]*))?([:)])")
_REPETITION = re.compile(r"\{\d+(?:,\d*)?\}")
_OCTAL = re.compile(r"\\0([0-3][0-7]{2}|[0-7]{1,2})")
_HEX_BRACED = re.compile(r"\\x\{([0-9a-fA-F]+)\}")
_UNICODE_NAME = re.compile(r"\\N\{[^}]*\}")
_GROUP_PREFIXES = ("(?:", "(?=", "(?!", "(?<=", "(?<!", "(?>")
_SAME_ESCAPES = frozenset("tnrfadDsSwWbBAxu123456789")  # same meaning in both dialects (Python checks \x, \u)
_NOT_IN_CLASS = frozenset("bBAZz123456789")
_NO_PYTHON_EQUIVALENT = {
    "p": r"the Unicode/POSIX class \p{...}",
    "P": r"the Unicode/POSIX class \P{...}",
    "h": r"\h (horizontal whitespace)",
    "H": r"\H (non-horizontal-whitespace)",
    "v": r"\v (Java: any vertical whitespace; Python: only the VT character)",
    "V": r"\V (non-vertical-whitespace)",
    "R": r"\R (any line break)",
    "X": r"\X (grapheme cluster)",
    "G": r"\G (end of previous match)",
}


class PatternError(UsageError):
    """A LIST of regexes that MM2 would reject, or that Python cannot match the way Java does."""


class _JavaSyntaxError(Exception):
    """Java's `Pattern.compile` would throw: the config is wrong for MM2 too."""


class _NoPythonEquivalent(Exception):
    """Valid Java, but Python's `re` cannot match it the same way."""


_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.\-]*")  # valid, and the same, in Java and Python


def parse_list(value: str) -> tuple[str, ...]:
    """Split a LIST value exactly as Kafka's `ConfigDef` does."""
    trimmed = value.strip(_JAVA_TRIM)
    if not trimmed:
        return ()
    return tuple(_LIST_SEPARATOR.split(trimmed))


def compile_patterns(items: Sequence[str], *, key: str = "regex list") -> re.Pattern[str] | None:
    """Join `items` with `|` into one pattern for `fullmatch`, as MM2 does; None if there are no items.

    `key` names the setting in error messages (e.g. `topics.exclude`).
    """
    if not items:
        return None
    try:
        # MM2 compiles the joined pattern: `(a, b)` is valid although neither item is on its own.
        return re.compile(translate_java_regex("|".join(items)), re.ASCII)
    except (_JavaSyntaxError, _NoPythonEquivalent, re.error) as joined_error:
        # Name the culprit; items that cannot be wrong are skipped, so a huge list fails fast.
        for item in items:
            if _PLAIN_NAME.fullmatch(item) is None:
                try:
                    re.compile(translate_java_regex(item), re.ASCII)
                except (_JavaSyntaxError, _NoPythonEquivalent, re.error) as item_error:
                    raise PatternError(_describe(key, item, item_error)) from item_error
        raise PatternError(_describe(key, "|".join(items), joined_error)) from joined_error


def matches(pattern: re.Pattern[str] | None, name: str) -> bool:
    """MM2's `pattern != null && pattern.matcher(name).matches()`."""
    return pattern is not None and pattern.fullmatch(name) is not None


class IncludeExclude:
    """MM2's default filters' rule: a name is selected when it matches the include LIST and not the exclude LIST.

    `DefaultTopicFilter` and `DefaultGroupFilter` derive from it and name their two keys and defaults as class
    attributes; `from_settings` reads them the way MM2's filters' `configure(props)` does, and the keys name the
    setting in errors."""

    INCLUDE_KEY: ClassVar[str]
    EXCLUDE_KEY: ClassVar[str]
    DEFAULT_INCLUDE: ClassVar[str] = ".*"
    DEFAULT_EXCLUDE: ClassVar[str]

    def __init__(self, include: str | None = None, exclude: str | None = None) -> None:
        include = self.DEFAULT_INCLUDE if include is None else include
        exclude = self.DEFAULT_EXCLUDE if exclude is None else exclude
        self._include = compile_patterns(parse_list(include), key=self.INCLUDE_KEY)
        self._exclude = compile_patterns(parse_list(exclude), key=self.EXCLUDE_KEY)

    @classmethod
    def from_settings(cls, settings: Mapping[str, str]) -> Self:
        return cls(settings.get(cls.INCLUDE_KEY), settings.get(cls.EXCLUDE_KEY))

    def __call__(self, name: str) -> bool:
        return matches(self._include, name) and not matches(self._exclude, name)


def _describe(key: str, item: str, error: Exception) -> str:
    if isinstance(error, _NoPythonEquivalent):
        return (
            f"{key}: regex {item!r} uses {error}, which Mirrorflow cannot match exactly as MM2 (Java) does; "
            "rewrite it with plain characters and [...] classes"
        )
    hint = ""
    if item.count("{") != item.count("}"):
        hint = " (LIST values are split on commas, so a repetition like a{1,3} is cut into 'a{1' and '3}')"
    return f"{key}: {item!r} is not a valid regex: {error}{hint}"


def translate_java_regex(java: str) -> str:
    """Rewrite a Java regex into a Python one with the same meaning under `re.ASCII`; see the module rules."""
    out: list[str] = []
    # Per open group, the `(?flags:` we opened for its mid-group `(?flags)` switches. Java applies a switch
    # up to the end of the enclosing group, across `|`: each alternative gets its own scoped copy.
    scopes: list[list[str]] = [[]]
    i, n = 0, len(java)
    while i < n:
        char = java[i]
        if char == "\\":
            text, i = _escape(java, i, in_class=False)
        elif char == "[":
            text, i = _char_class(java, i)
        elif char == "(":
            text, i, is_switch = _group_opening(java, i)
            if is_switch:
                scopes[-1].append(text)
            else:
                scopes.append([])
        elif char == ")":
            text = ")" * (len(scopes.pop()) + 1) if len(scopes) > 1 else ")"  # unbalanced: Python reports it
            i += 1
        elif char == "|":
            text, i = ")" * len(scopes[-1]) + "|" + "".join(scopes[-1]), i + 1
        elif char == "{":
            repetition = _REPETITION.match(java, i)
            if repetition is None:
                raise _JavaSyntaxError(f"illegal repetition at index {i}: '{{' must start {{n}}, {{n,}} or {{n,m}}")
            text, i = repetition.group(), repetition.end()
        elif char == "}":
            text, i = r"\}", i + 1
        else:
            text, i = char, i + 1
        out.append(text)
    out.append(")" * len(scopes[0]))
    return "".join(out)


def _group_opening(java: str, i: int) -> tuple[str, int, bool]:
    """Returns (python text, next index, whether it is a flag switch `(?i)` rather than a group)."""
    if not java.startswith("(?", i):
        return "(", i + 1, False
    named = _NAMED_GROUP.match(java, i)
    if named:
        return f"(?P<{named.group(1)}>", named.end(), False
    for prefix in _GROUP_PREFIXES:
        if java.startswith(prefix, i):
            return prefix, i + len(prefix), False
    flags = _INLINE_FLAGS.match(java, i)
    if flags is None:
        raise _JavaSyntaxError(f"unknown group construct {java[i : i + 3]!r} at index {i}")
    on, off, end = flags.group(1), flags.group(2) or "", flags.group(3)
    unsupported = sorted(set(on + off) & set("uUx"))
    if unsupported:
        raise _NoPythonEquivalent(f"the inline flag(s) {', '.join(unsupported)}")
    on, off = (
        on.replace("d", ""),
        off.replace("d", ""),
    )  # UNIX_LINES: Python's `.`, `^`, `$` already behave so
    text = f"(?{on}-{off}:" if off else (f"(?{on}:" if on else "(?:")
    return text, flags.end(), end == ")"


def _char_class(java: str, i: int) -> tuple[str, int]:
    parts, j, n = ["["], i + 1, len(java)
    if java.startswith("^", j):
        parts.append("^")
        j += 1
    if java.startswith("]", j):  # a leading ] is literal in both dialects
        parts.append(r"\]")
        j += 1
    while j < n:
        char = java[j]
        if char == "]":
            parts.append("]")
            return "".join(parts), j + 1
        if char == "\\":
            text, j = _escape(java, j, in_class=True)
            parts.append(text)
            continue
        if char == "[":
            raise _NoPythonEquivalent("a nested character class (Java's class union [a[b]])")
        if java.startswith("&&", j):
            raise _NoPythonEquivalent("character class intersection (&&)")
        parts.append("\\" + char if char in "&~|" else char)  # Python reserves doubled &, ~, | in classes
        j += 1
    raise _JavaSyntaxError(f"unclosed character class starting at index {i}")


def _escape(java: str, i: int, *, in_class: bool) -> tuple[str, int]:
    if i + 1 >= len(java):
        raise _JavaSyntaxError("the pattern ends with a lone backslash")
    char = java[i + 1]
    if char == "Q":
        end = java.find(r"\E", i + 2)
        literal = java[i + 2 :] if end < 0 else java[i + 2 : end]
        return re.escape(literal), len(java) if end < 0 else end + 2
    if char == "E":
        raise _JavaSyntaxError(r"\E without a preceding \Q")
    if char in _NO_PYTHON_EQUIVALENT:
        raise _NoPythonEquivalent(_NO_PYTHON_EQUIVALENT[char])
    if in_class and char in _NOT_IN_CLASS:
        raise _JavaSyntaxError(f"\\{char} is not allowed inside a character class")
    if char == "0":
        octal = _OCTAL.match(java, i)
        if octal is None:
            raise _JavaSyntaxError(r"illegal octal escape: Java needs \0n, \0nn or \0mnn")
        return re.escape(chr(int(octal.group(1), 8))), octal.end()
    if char == "x":
        braced = _HEX_BRACED.match(java, i)
        if braced:
            code = int(braced.group(1), 16)
            if code > 0x10FFFF:
                raise _JavaSyntaxError(f"hexadecimal code point {braced.group(1)} is out of range")
            return re.escape(chr(code)), braced.end()
    if char == "k":
        named = _NAMED_BACKREFERENCE.match(java, i)
        if named is None:
            raise _JavaSyntaxError(r"\k must be followed by <name>")
        return f"(?P={named.group(1)})", named.end()
    if char == "N":
        name = _UNICODE_NAME.match(java, i)
        if name is None:
            raise _JavaSyntaxError(r"\N must be followed by {character name}")
        return name.group(), name.end()
    if char == "e":
        return r"\x1b", i + 2
    if char == "c":
        if i + 2 >= len(java):
            raise _JavaSyntaxError(r"\c must be followed by a character")
        return re.escape(chr(ord(java[i + 2]) ^ 64)), i + 3
    if char == "z":
        return r"\Z", i + 2
    if char == "Z":  # Java: end of input, or before a final line terminator
        return r"(?=(?:\r\n|[\n\r\x85\u2028\u2029])?\Z)", i + 2
    if char in _SAME_ESCAPES:
        return "\\" + char, i + 2
    if char.isascii() and char.isalpha():
        raise _JavaSyntaxError(f"illegal/unsupported escape sequence \\{char}")
    return re.escape(char), i + 2
