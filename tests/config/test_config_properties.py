"""Reading mm2.properties like java.util.Properties, with the line of every key (docs/mm2-reference.md §1.0)."""

from __future__ import annotations

from pathlib import Path

from mirrorflow.config.issues import IssueLog
from mirrorflow.config.properties_file import PropertiesFile, lost_escapes, read_properties


def _read(tmp_path: Path, data: str | bytes) -> tuple[PropertiesFile | None, IssueLog]:
    path = tmp_path / "mm2.properties"
    if isinstance(data, str):
        path.write_text(data, encoding="utf-8")
    else:
        path.write_bytes(data)
    log = IssueLog(str(path))
    return read_properties(path, log), log


def test_separators_comments_and_line_numbers(tmp_path: Path) -> None:
    props, log = _read(
        tmp_path,
        "# a comment\n"
        "! another comment\n"
        "clusters: a, b\n"
        "a.bootstrap.servers   host-a:9092\n"
        "  b.bootstrap.servers=host-b:9092\n"
        "\n"
        "a->b.enabled = true\n",
    )
    assert props is not None
    assert props.values == {
        "clusters": "a, b",
        "a.bootstrap.servers": "host-a:9092",
        "b.bootstrap.servers": "host-b:9092",
        "a->b.enabled": "true",
    }
    assert props.lines == {
        "clusters": 3,
        "a.bootstrap.servers": 4,
        "b.bootstrap.servers": 5,
        "a->b.enabled": 7,
    }
    assert log.issues == []


def test_continuation_lines_keep_the_line_of_their_key(tmp_path: Path) -> None:
    props, _ = _read(
        tmp_path,
        "clusters = a\n"
        "a.sasl.jaas.config = org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
        '    username="u" \\\n'
        '    password="p";\n'
        "topics = t1,\\\n"
        "   t2\n",
    )
    assert props is not None
    assert props.values["a.sasl.jaas.config"] == (
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p";'
    )
    assert props.values["topics"] == "t1,t2"
    assert props.lines["a.sasl.jaas.config"] == 2
    assert props.lines["topics"] == 5


def test_bare_key_has_an_empty_value(tmp_path: Path) -> None:
    props, _ = _read(tmp_path, "primary->backup.enabled\nbackup->primary.enabled\n")
    assert props is not None
    assert props.values == {"primary->backup.enabled": "", "backup->primary.enabled": ""}
    assert props.lines == {"primary->backup.enabled": 1, "backup->primary.enabled": 2}


def test_escapes_in_keys_and_values(tmp_path: Path) -> None:
    props, _ = _read(tmp_path, "key\\ with\\ space = v\\u00e9\\tx\nliteral = a\\\\b\n")
    assert props is not None
    assert props.values == {"key with space": "vé\tx", "literal": "a\\b"}
    assert props.lines == {"key with space": 1, "literal": 2}


def test_hash_colon_comment_is_an_ordinary_comment(tmp_path: Path) -> None:
    # jproperties alone would read "#:" lines as metadata and reject "#:" with nothing after it.
    props, log = _read(tmp_path, "#:\n#: note = x\nclusters = a\n")
    assert props is not None
    assert props.values == {"clusters": "a"}
    assert log.issues == []


def test_repeated_key_last_wins_with_a_warning(tmp_path: Path) -> None:
    props, log = _read(tmp_path, "topics = a\nclusters = x\ntopics = b\n")
    assert props is not None
    assert props.values["topics"] == "b"
    assert props.lines["topics"] == 3
    [warning] = log.warnings
    assert (warning.line, warning.key) == (3, "topics")
    assert "line 1" in warning.problem


def test_backslash_lost_to_properties_escaping(tmp_path: Path) -> None:
    props, _ = _read(tmp_path, "topics = ^(?!.*\\.internal).*\ngroups = a\\\\.b\n")
    assert props is not None
    assert props.values["topics"] == "^(?!.*.internal).*"
    assert lost_escapes(props.raw_values["topics"]) == ["\\."]
    assert props.values["groups"] == "a\\.b"
    assert lost_escapes(props.raw_values["groups"]) == []


def test_undecodable_bytes_are_an_error_with_their_line(tmp_path: Path) -> None:
    props, log = _read(tmp_path, b"clusters = a\na.bootstrap.servers = h\xff:9092\n")
    assert props is not None
    [error] = log.errors
    assert error.line == 2
    assert "0xff" in error.problem


def test_missing_file(tmp_path: Path) -> None:
    log = IssueLog(str(tmp_path / "nope.properties"))
    assert read_properties(tmp_path / "nope.properties", log) is None
    [error] = log.errors
    assert error.problem == "file not found"
    assert error.render().startswith(f"{tmp_path / 'nope.properties'}: file not found.")


def test_plain_and_escaped_occurrences_of_a_key_last_one_wins(tmp_path: Path) -> None:
    """Plain lines bypass jproperties (speed); the value must still be the last occurrence's, either way."""
    text = "a = one\na = t\\u0077o\nb = x\\ty\nb = plain  \nc = keep\\\n    going\nd=:v\n"
    props, _ = _read(tmp_path, text)
    assert props is not None
    assert props.values == {"a": "two", "b": "plain  ", "c": "keepgoing", "d": ":v"}
    assert list(props.values) == ["a", "b", "c", "d"]
    assert props.lines == {"a": 2, "b": 4, "c": 5, "d": 7}
