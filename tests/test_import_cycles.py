"""No new import circles in the first-party code.

The import graph is built from the source with :mod:`ast` (nothing is imported): the modules of
``core/fmest``, of each plugin package (``plugins/<name>/fmest_*`` or
``plugins/<name>/src/fmest_*``) and the scripts in ``benchmarks/``, which import each other as
top-level modules (``import fitting``). Every import counts, also one inside a function (it is
still a dependency, only a later one) and ``__import__("name")`` /
``importlib.import_module("name")`` with a literal name. ``from pkg import name`` imports
``pkg.name`` when that is a module, else ``pkg``. An edge between a module and one of its own
packages (a package's ``__init__`` importing its submodules, or a submodule importing its
package) is not a circle; every other strongly connected component of more than one module is.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: Today's import circles: being removed by the renovation; this list may only shrink.
#: (Removed so far: accuracy/fitting/stack_fitting in benchmarks/, by stack_constants.py;
#: fmest_torch_runner.probe/ray_executor, by worker_process.py.)
KNOWN_CYCLES: list[frozenset[str]] = [
]


def _package_roots() -> Iterator[Path]:
    """``core/fmest`` and every plugin package, at depth 1 or 2 under its plugin folder (so the
    flat and the ``src/`` layout both work)."""
    yield ROOT / "core" / "fmest"
    for plugin in sorted(p for p in (ROOT / "plugins").iterdir() if p.is_dir()):
        for pattern in ("fmest_*/__init__.py", "*/fmest_*/__init__.py"):
            for init in sorted(plugin.glob(pattern)):
                if "tests" not in init.parts and not init.parent.name.endswith(".egg-info"):
                    yield init.parent


def _module_name(path: Path, root: Path) -> str:
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def first_party_modules() -> dict[str, tuple[Path, bool]]:
    """Module name -> (source file, is a package)."""
    modules: dict[str, tuple[Path, bool]] = {}
    for root in _package_roots():
        for path in sorted(root.rglob("*.py")):
            modules[_module_name(path, root)] = (path, path.name == "__init__.py")
    for path in sorted((ROOT / "benchmarks").glob("*.py")):
        modules[path.stem] = (path, False)
    return modules


def _known(name: str, modules: dict) -> str | None:
    """The deepest first-party module ``import name`` executes, or None for third-party."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in modules:
            return ".".join(parts[:end])
    return None


def _literal_import(node: ast.Call) -> str | None:
    """``__import__("x")`` or ``importlib.import_module("x")``: the name, else None."""
    func = node.func
    called = func.id if isinstance(func, ast.Name) else \
        func.attr if isinstance(func, ast.Attribute) else None
    if called not in ("__import__", "import_module") or not node.args:
        return None
    arg = node.args[0]
    return arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else None


def imports_of(module: str, path: Path, is_package: bool, modules: dict) -> set[str]:
    """The first-party modules ``module`` imports, anywhere in its source."""
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(filter(None, (_known(a.name, modules) for a in node.names)))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[:len(base_parts) - (node.level - 1)]
                base = ".".join([*base_parts, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            for alias in node.names:
                target = f"{base}.{alias.name}"
                hit = target if target in modules else _known(base, modules)
                if hit:
                    found.add(hit)
        elif isinstance(node, ast.Call) and (name := _literal_import(node)):
            if hit := _known(name, modules):
                found.add(hit)
    return found


def _related(a: str, b: str) -> bool:
    """``a`` is ``b`` or one of its packages, or the other way round."""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def import_graph() -> dict[str, set[str]]:
    modules = first_party_modules()
    return {name: {t for t in imports_of(name, path, is_pkg, modules) if not _related(name, t)}
            for name, (path, is_pkg) in modules.items()}


def strongly_connected(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Tarjan's strongly connected components, iteratively (no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[frozenset[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.add(member)
                    if member == node:
                        break
                components.append(frozenset(members))
    return components


def import_cycles() -> set[frozenset[str]]:
    return {c for c in strongly_connected(import_graph()) if len(c) > 1}


def _describe(cycles) -> str:
    return "\n".join(" <-> ".join(sorted(c)) for c in sorted(cycles, key=sorted)) or "(none)"


@pytest.fixture(scope="module")
def cycles() -> set[frozenset[str]]:
    return import_cycles()


def test_the_graph_sees_every_part():
    """The discovery finds the core, every plugin and the benchmarks, and real edges."""
    modules = first_party_modules()
    plugins = {p.name for p in (ROOT / "plugins").iterdir()
               if p.is_dir() and (p / "pyproject.toml").exists()}
    found = {name.partition(".")[0] for name in modules}
    assert "fmest" in found and "accuracy" in found
    assert len([f for f in found if f.startswith("fmest_")]) == len(plugins), found
    graph = import_graph()
    assert "fmest.job" in graph["fmest.engine"]
    assert "measured" in graph["accuracy"]


def test_tarjan_finds_circles_and_skips_packages():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a", "e"}, "e": {"d"}, "f": set()}
    assert {c for c in strongly_connected(graph) if len(c) > 1} == \
        {frozenset("abc"), frozenset("de")}
    assert _related("fmest.plan", "fmest.plan.space") and _related("fmest", "fmest.job")
    assert not _related("fmest.plan", "fmest.planner")


def test_import_cycles_are_the_known_ones(cycles):
    """When a circle is broken, delete it from KNOWN_CYCLES (the list may only shrink)."""
    assert cycles == set(KNOWN_CYCLES), "import circles now:\n" + _describe(cycles)


def test_no_new_import_cycle(cycles):
    new = {c for c in cycles if c not in KNOWN_CYCLES}
    assert not new, ("new import circle(s); move what the modules share into a module of its "
                     "own so imports go one way:\n" + _describe(new))
