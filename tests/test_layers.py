"""The packages' layers: ``stores`` <- ``agents`` <- ``app`` <- ``spark_bridge`` <- ``bench``.

A module may import its own package and the ones below it, never one above; no two modules
import each other, directly or round a circle. Every import statement counts, at any depth:
inside functions and ``TYPE_CHECKING`` blocks too (read with ``ast``, nothing is run). And the
algorithms, ``stores.fiba`` and ``stores.monoids``, run on the standard library alone.
"""

from __future__ import annotations

import ast
import functools
import inspect
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("stores", "agents", "app", "spark_bridge", "bench")
"""Lowest first: a package may import only itself and the ones before it."""


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules() -> dict[str, Path]:
    """Every module of the layered packages, by dotted name."""
    return {
        module_name(path): path for package in LAYERS for path in (ROOT / package).rglob("*.py")
    }


def imported_modules(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules that module ``name`` (at ``path``) imports anywhere in its body:
    ``from p import m`` names module ``p.m`` when that is one, else ``p``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                for alias in node.names
            ]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


@functools.cache
def import_graph() -> dict[str, set[str]]:
    modules = package_modules()
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """``"a.x -> b.y"`` for every import of a package above the importer's own."""
    rank = {package: i for i, package in enumerate(LAYERS)}
    return sorted(
        f"{name} -> {target}"
        for name, targets in graph.items()
        for target in targets
        if rank[target.split(".")[0]] > rank[name.split(".")[0]]
    )


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan), each a circle of
    imports. O(modules + imports)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_package_imports_one_above_it():
    assert upward_imports(import_graph()) == []


def test_no_modules_import_each_other_round_a_circle():
    found = [sorted(c) for c in cycles(import_graph())]
    assert found == []


def test_the_checks_see_what_they_are_meant_to_see():
    """The graph holds imports inside functions (``app.cli`` imports ``agents.records`` in one)
    and ``TYPE_CHECKING`` blocks (``agents.input_reader`` imports ``agents.windows`` in one),
    and both checks find what they exist for in a graph that has it."""
    graph = import_graph()
    assert "agents.records" in graph["app.cli"]
    assert "agents.windows" in graph["agents.input_reader"]
    assert "stores.fiba" in graph["stores.key_windows"]
    broken = {**graph, "stores.fiba": graph["stores.fiba"] | {"app.settings"}}
    assert upward_imports(broken) == ["stores.fiba -> app.settings"]
    circle = {**graph, "stores.monoids": graph["stores.monoids"] | {"stores.key_windows"}}
    assert any({"stores.monoids", "stores.key_windows"} <= c for c in cycles(circle))


def test_fiba_and_monoids_run_on_the_standard_library_alone():
    """``python -I -S``: no site-packages, no PYTHONPATH; only the repository on the path.
    Random inserts, evictions and range queries of several monoids equal a brute force, and
    nothing outside the standard library and ``stores`` was imported."""
    code = textwrap.dedent(
        f"""
        import random, sys
        sys.path.insert(0, {str(ROOT)!r})
        from stores.fiba import FiBA
        from stores.monoids import monoid

        rng = random.Random(21)
        for name in ("count", "sum", "max", "min", "first", "last", "collect"):
            m = monoid(name)
            window, kept = FiBA(m), []
            for step in range(400):
                if rng.random() < 0.1 and kept:
                    horizon = rng.choice(kept)[0]
                    window.bulk_evict(horizon)
                    kept = [e for e in kept if e[0] > horizon]
                else:
                    t, x = rng.randrange(1000), rng.randrange(-50, 50)
                    window.insert(t, x)
                    kept.append((t, x))
                lo, hi = sorted(rng.randrange(1000) for _ in range(2))
                answers = ((window.query(), 0, 999), (window.query_range(lo, hi), lo, hi))
                for got, a, b in answers:
                    inside = sorted((e for e in kept if a <= e[0] <= b), key=lambda e: e[0])
                    agg = m.identity
                    for _, x in inside:
                        agg = m.combine(agg, m.lift(x))
                    assert got == m.lower(agg), (name, step, got, m.lower(agg))
        third_party = sorted(
            module for module in sys.modules
            if module.split(".")[0] not in sys.stdlib_module_names | {{"stores", "__main__"}}
        )
        assert not third_party, third_party
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok"


def protocol_members(protocol: type) -> set[str]:
    """The attributes, properties and methods a Protocol class and its bases declare."""
    return {
        name
        for cls in protocol.__mro__
        if getattr(cls, "_is_protocol", False) and cls.__module__ != "typing"
        for name in (*inspect.get_annotations(cls), *cls.__dict__)
        if not name.startswith("_")
    }


def settings_reads(package: str) -> set[str]:
    """The names ``n`` of every ``<...>settings.n`` read in ``package``'s modules."""
    return {
        node.attr
        for path in (ROOT / package).rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Attribute)
        and (
            (isinstance(node.value, ast.Name) and node.value.id == "settings")
            or (isinstance(node.value, ast.Attribute) and node.value.attr == "settings")
        )
    }


def test_the_settings_protocols_declare_what_their_layer_reads_and_settings_has_it():
    """``stores`` and ``agents`` read the worker's settings through Protocols of their own,
    which declare exactly the fields the layer reads; ``app.settings.Settings`` has them all."""
    from agents.config import WorkerSettings
    from app.settings import Settings
    from stores.window_store import StoreSettings

    declared = {
        "stores": protocol_members(StoreSettings),
        "agents": protocol_members(WorkerSettings),
    }
    for package, members in declared.items():
        assert settings_reads(package) == members, package
        assert [name for name in members if not hasattr(Settings(), name)] == [], package
