"""No module in plugins/ over 400 lines and no function over 80 (issue 21), with a ceiling for today's offenders.

A long module or function is where a concept hides that has no name yet. The check reads the source with `ast`,
so it needs nothing installed and no Kafka. An offender listed in `CEILINGS` may shrink but never grow; once it
is within the limit its entry must go (the test says so), and any new offender fails.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

PLUGINS = Path(__file__).resolve().parents[1] / "plugins"
MODULE_LIMIT = 400
FUNCTION_LIMIT = 80

CEILINGS: dict[str, int] = {
    # module (path under plugins/) or function (`path::Class.method`, nested ones `outer.inner`) -> today's size.
}


def sizes(source: str, relative: str) -> dict[str, int]:
    """Lines of the module (key `relative`) and of every function in it, methods and nested functions included
    (key `relative::qualified.name`; a function's lines run from its `def` to its last line)."""
    found = {relative: len(source.splitlines())}

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                found[f"{relative}::{name}"] = (child.end_lineno or child.lineno) - child.lineno + 1
                walk(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                walk(child, prefix + child.name + ".")
            else:
                walk(child, prefix)

    walk(ast.parse(source), "")
    return found


def over_limit(found: dict[str, int]) -> dict[str, int]:
    return {name: size for name, size in found.items() if size > (FUNCTION_LIMIT if "::" in name else MODULE_LIMIT)}


def plugin_sizes() -> dict[str, int]:
    found: dict[str, int] = {}
    for path in sorted(PLUGINS.rglob("*.py")):
        found.update(sizes(path.read_text(encoding="utf-8"), path.relative_to(PLUGINS).as_posix()))
    return found


def test_sizes_counts_modules_methods_and_nested_functions() -> None:
    body = "\n".join(f"        x{i} = {i}" for i in range(FUNCTION_LIMIT))
    source = textwrap.dedent(
        """
        class Holder:
            def method(self):
                def inner():
                    return 1
        {body}
                return inner
        """
    ).format(body=body)
    found = sizes(source, "m.py")
    assert found["m.py::Holder.method.inner"] == 2
    assert found["m.py::Holder.method"] == FUNCTION_LIMIT + 4
    assert over_limit(found) == {"m.py::Holder.method": FUNCTION_LIMIT + 4}


def test_no_module_or_function_in_plugins_is_over_the_limit() -> None:
    found = plugin_sizes()
    offenders = over_limit(found)
    new = {name: size for name, size in offenders.items() if name not in CEILINGS}
    grown = {name: (size, CEILINGS[name]) for name, size in offenders.items() if CEILINGS.get(name, size) < size}
    assert not new, (
        f"over {MODULE_LIMIT} lines per module / {FUNCTION_LIMIT} per function: {new}; split by concept "
        "(a helper or a module with a name), do not add to CEILINGS"
    )
    assert not grown, f"listed offenders grew past their ceiling (size, ceiling): {grown}; shrink them instead"


def test_every_ceiling_is_still_an_offender() -> None:
    """A ceiling whose module or function is gone or within the limit is stale: removing it keeps it from
    coming back."""
    offenders = over_limit(plugin_sizes())
    stale = sorted(name for name in CEILINGS if name not in offenders)
    assert not stale, f"now within the limit or gone, delete from CEILINGS in tests/test_code_size.py: {stale}"


def test_no_two_modules_share_a_name() -> None:
    """A reader finds a behaviour by its module's name: `errors.py` in two packages makes them guess which."""
    seen: dict[str, list[str]] = {}
    for path in sorted((PLUGINS / "mirrorflow").rglob("*.py")):
        if path.name != "__init__.py":
            seen.setdefault(path.name, []).append(str(path.relative_to(PLUGINS)))
    shared = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not shared, f"modules sharing a name (rename one after what it holds): {shared}"
