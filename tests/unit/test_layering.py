"""Imports run one way: each package imports only from itself and the layers below it, and
no modules import each other in a cycle (function-level imports included).

``LAYERS`` is the architecture, lowest first; a new package must be placed in it. Imports
under ``if TYPE_CHECKING:`` are for annotations only (no run-time dependency) and are left
out, so a lower layer may name a higher layer's type in a signature.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "millpond"

# Lowest first. A module directly under millpond/ is its own unit (e.g. "api", "cli").
LAYERS: list[set[str]] = [
    {"errors", "api", "partitioner", "files"},  # leaves: no millpond imports at run time
    {"clibase", "progress"},  # the CLI's error boundary, shared options and progress display
    {"__init__"},  # the package root: the public API (re-exports of api and errors)
    {"config"},
    {"serdes"},
    {"streams"},  # the dataflow API: apps compiled onto the config of a StreamTask job
    {"stores"},
    {"metrics"},
    {"kafka"},
    {"dev"},
    {"changelog"},
    {"job"},  # one job's clients, names and admin, for the container, the CLI and Spark
    {"backup"},
    {"sideinputs"},
    {"query"},  # live queries of a running job's stores (the runtime serves them)
    {"tasks"},
    {"ops"},
    {"spark"},
    {"cli"},
]
RANK = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def unit(module: str) -> str:
    """The layering unit of ``millpond.x.y``: ``x`` (or ``__init__`` for ``millpond``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _type_checking_only(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def imports_of(path: Path) -> set[str]:
    """The millpond modules ``path`` imports at run time (any depth in the file)."""
    tree = ast.parse(path.read_text(), str(path))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            # ``from millpond.x import y`` may import the module millpond.x.y
            names = [f"{mod}.{a.name}" if _is_module(f"{mod}.{a.name}") else mod
                     for a in node.names]
        else:
            continue
        if _type_checking_only(node, parents):
            continue
        out.update(n for n in names if n == "millpond" or n.startswith("millpond."))
    out.discard(me)
    return out


def _is_module(name: str) -> bool:
    path = ROOT.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in sorted(ROOT.rglob("*.py"))}


def test_every_package_has_a_layer() -> None:
    units = {unit(m) for m in graph()}
    assert units <= set(RANK), f"place these in LAYERS: {sorted(units - set(RANK))}"


def test_imports_run_downwards_only() -> None:
    upward = []
    for mod, deps in graph().items():
        for dep in deps:
            if dep == "millpond":
                dep_unit = "__init__"
            else:
                dep_unit = unit(dep)
            if unit(mod) != dep_unit and RANK[dep_unit] >= RANK[unit(mod)]:
                upward.append(f"{mod} -> {dep}")
    assert not upward, "imports from a higher (or same-rank) package:\n" + "\n".join(upward)


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """A cycle in ``edges`` as a list of nodes (first == last), or None."""
    state: dict[str, int] = defaultdict(int)  # 0 new, 1 on the stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state[nxt] == 1:
                return stack[stack.index(nxt):] + [nxt]
            if state[nxt] == 0:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if state[node] == 0:
            found = visit(node)
            if found:
                return found
    return None


def test_no_module_cycles() -> None:
    edges = graph()
    # A package's __init__ re-exporting its own modules is not a cycle of logic.
    for mod in edges:
        edges[mod] = {d for d in edges[mod] if not (mod.startswith(d + ".") and _is_init(d))}
    cycle = find_cycle(edges)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_no_package_cycles() -> None:
    edges: dict[str, set[str]] = defaultdict(set)
    for mod, deps in graph().items():
        for dep in deps:
            a, b = unit(mod), "__init__" if dep == "millpond" else unit(dep)
            if a != b:
                edges[a].add(b)
    cycle = find_cycle(edges)
    assert cycle is None, "package cycle: " + " -> ".join(cycle or [])


def _is_init(name: str) -> bool:
    return (ROOT.parent.joinpath(*name.split(".")) / "__init__.py").is_file()


@pytest.mark.parametrize("edges, cyclic", [
    ({"a": {"b"}, "b": {"c"}, "c": set()}, False),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, True),
    ({"a": {"a"}}, True),
])
def test_find_cycle_finds_cycles(edges: dict[str, set[str]], cyclic: bool) -> None:
    assert (find_cycle(edges) is not None) is cyclic


def test_the_walker_sees_function_level_and_relative_imports(tmp_path: Path) -> None:
    # The real tree: cli.py imports millpond.ops only inside its command functions.
    assert any(d.startswith("millpond.ops") for d in imports_of(ROOT / "cli.py"))


def test_every_package_says_what_it_is() -> None:
    """Each package's ``__init__`` starts with a docstring saying its role."""
    silent = [str(p.relative_to(ROOT.parent)) for p in sorted(ROOT.rglob("__init__.py"))
              if len((ast.get_docstring(ast.parse(p.read_text())) or "").split()) < 4]
    assert not silent, f"packages without a docstring that says what they hold: {silent}"
