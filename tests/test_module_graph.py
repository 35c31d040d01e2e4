"""``docs/design/modules.md`` is what ``bench.module_graph`` draws from today's imports."""

import pytest

from bench import module_graph
from tests.test_layers import cycles

pytestmark = pytest.mark.once  # pure Python on either build, no broker


def test_the_committed_module_graph_is_current():
    assert module_graph.PAGE.read_text() == module_graph.render(*module_graph.graph()), (
        "docs/design/modules.md is stale: run `python -m bench.module_graph`"
    )


def test_imports_are_read_by_statement_relative_and_by_name(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    code = (
        "import os\n"
        "from pkg.low import thing\n"
        "from . import mid\n"
        "def later():\n"
        "    import pkg.deep.inner as x\n"
        'COMMANDS = {"run": "pkg.top:command", "text": "not:a module"}\n'
    )
    (tmp_path / "pkg" / "user.py").write_text(code)
    known = {"pkg", "pkg.low", "pkg.mid", "pkg.deep.inner", "pkg.top", "pkg.user"}
    path = tmp_path / "pkg" / "user.py"
    assert module_graph.imports_of("pkg.user", path, known) == {
        "pkg", "pkg.low", "pkg.mid", "pkg.deep.inner"
    }  # fmt: skip
    assert module_graph.by_name(path, known) == {"pkg.top"}


def test_no_circle_runs_through_the_imports_by_name():
    """An import by name (``app.cli`` hands ``fiba spark-read`` to ``spark_bridge.cli``) counts:
    the module it names may not import its namer back, directly or round a circle."""
    edges, named = module_graph.graph()
    both = {name: edges[name] | named[name] for name in edges}
    assert [sorted(circle) for circle in cycles(both)] == []


def test_the_fiba_core_needs_only_the_standard_library():
    edges, _ = module_graph.graph()
    assert edges["stores.fiba"] == set()


def test_a_new_import_changes_the_page():
    edges, named = module_graph.graph()
    before = module_graph.render(edges, named)
    edges["stores.fiba"] = edges["stores.fiba"] | {"agents.windows"}
    after = module_graph.render(edges, named)
    assert before != after
    assert "stores -->|1| agents" in after
