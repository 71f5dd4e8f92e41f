"""The package's import graph has no cycle, counting imports inside functions and under TYPE_CHECKING (issue 21).

import-linter's contracts in pyproject.toml keep named packages in order, but none of its contract types can say
"acyclic" for the whole package, so this test does: it builds the same graph import-linter uses (grimp, which
reads every `import` statement wherever it is) and lists each strongly connected component with the lines that
tie it together. A lazy import written only to dodge a cycle is still a cycle here. The same holds one level up:
inside each package, its subpackages taken as one module each (the failover package and the flow cycle once
imported each other through different modules).
"""

from __future__ import annotations

from collections.abc import Iterable

import grimp
from grimp import ImportGraph


def import_cycles(graph: ImportGraph, modules: Iterable[str]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative: no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    for root in sorted(modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            advanced = False
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.find_modules_directly_imported_by(nxt)))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def describe(graph: ImportGraph, component: list[str]) -> str:
    """The imports inside one cycle, `importer -> imported (line N)`, for the failure message."""
    members = set(component)
    lines = []
    for importer in component:
        for imported in sorted(graph.find_modules_directly_imported_by(importer) & members):
            where = ", ".join(
                str(d["line_number"]) for d in graph.get_import_details(importer=importer, imported=imported)
            )
            lines.append(f"  {importer} -> {imported} (line {where})")
    return "\n".join(lines)


def test_import_cycles_finds_a_planted_cycle() -> None:
    """The detector itself: a three-module loop is found, a tail hanging off it is not part of it."""
    graph = ImportGraph()
    for importer, imported in [("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.d", "p.a"), ("p.c", "p.e")]:
        graph.add_import(importer=importer, imported=imported, line_number=1, line_contents="import x")
    assert import_cycles(graph, graph.modules) == [["p.a", "p.b", "p.c"]]


def test_mirrorflow_has_no_import_cycle() -> None:
    graph = grimp.build_graph("mirrorflow", include_external_packages=False)
    cycles = import_cycles(graph, graph.modules)
    report = "\n\n".join(f"cycle of {len(c)} modules:\n{describe(graph, c)}" for c in cycles)
    assert not cycles, f"import cycles in mirrorflow (move the shared names to a module both can import):\n{report}"


def squashed(graph: ImportGraph, package: str) -> ImportGraph:
    """The children of `package` as nodes, a subpackage standing for everything in it."""
    children = sorted(graph.find_children(package))
    owner = {m: child for child in children for m in {child, *graph.find_descendants(child)}}
    result = ImportGraph()
    for child in children:
        result.add_module(child)
    for module, child in owner.items():
        for imported in graph.find_modules_directly_imported_by(module):
            if owner.get(imported, child) != child:
                result.add_import(importer=child, imported=owner[imported])
    return result


def test_no_package_imports_a_sibling_that_imports_it_back() -> None:
    graph = grimp.build_graph("mirrorflow", include_external_packages=False)
    found = [
        f"in {package}: {' <-> '.join(cycle)}"
        for package in sorted(m for m in graph.modules if graph.find_children(m))
        for cycle in import_cycles(squashed(graph, package), graph.find_children(package))
    ]
    assert not found, "sibling packages/modules importing each other (move what both need below them):\n" + "\n".join(
        found
    )


def test_squashed_sees_a_cycle_between_a_subpackage_and_a_module() -> None:
    graph = ImportGraph()
    graph.add_import(importer="p.sub.a", imported="p.mod", line_number=1, line_contents="import p.mod")
    graph.add_import(importer="p.mod", imported="p.sub.b", line_number=1, line_contents="import p.sub.b")
    for module in ("p", "p.sub"):
        graph.add_module(module)
    assert import_cycles(squashed(graph, "p"), graph.find_children("p")) == [["p.mod", "p.sub"]]
