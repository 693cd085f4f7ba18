"""The seams hold in the import graph: no package imports a layer above its own, no two packages import each other
(directly or round a circle), the controller never imports a framework backend, the worker never imports a
launcher, no import circle exists between modules, and docs/architecture.md's layer table is this test's LAYERS."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).parents[2] / "src" / "dlbench"
DOC = Path(__file__).parents[2] / "docs" / "architecture.md"

# Layers of whole packages (and top-level modules), lowest first: a package may import its own layer and those
# below. docs/architecture.md shows the same table (test_the_architecture_doc_shows_these_layers).
LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "dlbench",
        "dlbench.spec",
        "dlbench.numerics",
        "dlbench.parallel",
        "dlbench.redact",
        "dlbench.envfile",
        "dlbench.paths",
        "dlbench.records",
        "dlbench.cases",
        "dlbench.capabilities",
        "dlbench.jsonout",
        "dlbench.printable",
    ),
    ("dlbench.data", "dlbench.protocol", "dlbench.reference", "dlbench.canonical"),
    ("dlbench.wire", "dlbench.machine"),
    ("dlbench.store",),
    ("dlbench.analysis",),
    ("dlbench.backends", "dlbench.refusals"),
    ("dlbench.envs", "dlbench.points"),
    ("dlbench.suite",),
    ("dlbench.worker", "dlbench.evaluate", "dlbench.check", "dlbench.launch", "dlbench.samemodel"),
    ("dlbench.report",),
    ("dlbench.runapi",),
    ("dlbench.cli", "dlbench.__main__"),
)
# The light registry every layer above backends may read; it imports no framework.
REGISTRY = "dlbench.backends"
WORKER_SIDE = ("dlbench.worker", "dlbench.evaluate", "dlbench.check", "dlbench.backends")


def package(module: str) -> str:
    """The package (or top-level module) a module belongs to: dlbench.store.rows -> dlbench.store."""
    return ".".join(module.split(".")[:2])


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def layer(module: str) -> int:
    unit = package(module)
    return next((i for i, units in enumerate(LAYERS) if unit in units), -1)


def imports(path: Path, top_level_only: bool) -> set[str]:
    """dlbench modules a file imports (all of them, or only those imported when the module loads)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    if top_level_only:  # try blocks at top level still load; `if TYPE_CHECKING:` blocks do not
        nodes = [
            n
            for stmt in tree.body
            for n in ast.walk(stmt)
            if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and not (isinstance(stmt, ast.If) and "TYPE_CHECKING" in ast.unparse(stmt.test))
        ]
    out: set[str] = set()
    pkg = module_name(path).rsplit(".", 0 if path.name == "__init__.py" else 1)[0]
    for node in nodes:
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("dlbench")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(pkg.split(".")[: len(pkg.split(".")) - node.level + 1] + ([base] if base else []))
            if base.startswith("dlbench"):
                out.add(base)
                out |= {
                    f"{base}.{a.name}"
                    for a in node.names
                    if (SRC.parent / f"{base}.{a.name}".replace(".", "/")).with_suffix(".py").exists()
                }
    return out


MODULES = {module_name(p): p for p in SRC.rglob("*.py")}


def _framework_backend(module: str) -> bool:
    return module.startswith("dlbench.backends.") and module not in ("dlbench.backends.base",)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_import_runs_upward(module: str) -> None:
    mine = layer(module)
    assert mine >= 0, f"{module} is in no layer: add it to LAYERS"
    upward = sorted(
        m
        for m in imports(MODULES[module], top_level_only=False)
        if layer(m) > mine and not (m == REGISTRY and mine >= layer(REGISTRY) - 1)
    )
    assert not upward, f"{module} (layer {mine}) imports {upward}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if not m.startswith(WORKER_SIDE)))
def test_the_controller_never_imports_a_framework_backend(module: str) -> None:
    found = sorted(m for m in imports(MODULES[module], top_level_only=False) if _framework_backend(m))
    assert not found, f"{module} imports {found}"


def test_the_worker_never_imports_a_launcher() -> None:
    worker = [p for m, p in MODULES.items() if m == "dlbench.worker" or m.startswith("dlbench.worker.")]
    assert len(worker) > 1  # the package: its entry and what it measures
    found = sorted(m for p in worker for m in imports(p, top_level_only=False) if m.startswith("dlbench.launch"))
    assert not found, found


def test_no_import_circle_at_load_time() -> None:
    graph = {m: {i for i in imports(p, top_level_only=True) if i in MODULES and i != m} for m, p in MODULES.items()}
    # a package's __init__ importing its own submodules is how registries load (cases/__init__.py): not a circle
    for m in graph:
        graph[m] = {i for i in graph[m] if not (MODULES[m].name == "__init__.py" and i.startswith(m + "."))}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                raise AssertionError("import circle: " + " -> ".join([*stack[stack.index(n) :], n]))
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


# -- reliability (#25): circles inside a package, whenever the import runs ------------------------------------
def _package(module: str) -> str:
    return module if MODULES[module].name == "__init__.py" else module.rsplit(".", 1)[0]


def test_no_import_circle_inside_a_package() -> None:
    """Modules of one package never import each other both ways, counting imports inside functions and under
    TYPE_CHECKING too: such a pair is one module in two files (recovery <-> store was)."""
    graph = {
        m: {
            i
            for i in imports(p, top_level_only=False)
            if i in MODULES
            and i != m
            and _package(i) == _package(m)
            and not (p.name == "__init__.py" and i.startswith(m + "."))
        }
        for m, p in MODULES.items()
    }
    circles = []
    for m, targets in graph.items():
        seen, todo = set(), list(targets)
        while todo:
            n = todo.pop()
            if n == m:
                circles.append(m)
                break
            if n not in seen:
                seen.add(n)
                todo.extend(graph[n])
    assert not circles, f"import circles inside a package through {sorted(circles)}"


# -- packages (#29): layers name whole packages, no circle between them, the doc shows the same table ------------
def _package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for m, p in MODULES.items():
        graph.setdefault(package(m), set()).update(
            package(i) for i in imports(p, top_level_only=False) if package(i) != package(m)
        )
    return graph


def test_every_package_is_in_one_layer() -> None:
    named = [u for units in LAYERS for u in units]
    assert len(named) == len(set(named)), "a package is named in two layers"
    assert not sorted({package(m) for m in MODULES} - set(named)), "add these packages to LAYERS"


def test_no_import_circle_between_packages() -> None:
    """Counting imports inside functions and under TYPE_CHECKING too: packages form a ladder, not a knot."""
    graph = _package_graph()
    for start in graph:
        seen, todo = set(), [(n, [start, n]) for n in graph[start]]
        while todo:
            n, path = todo.pop()
            assert n != start, "import circle between packages: " + " -> ".join(path)
            if n not in seen:
                seen.add(n)
                todo.extend((k, [*path, k]) for k in graph.get(n, ()))


def _doc_layers() -> tuple[tuple[str, ...], ...]:
    """The layer table of docs/architecture.md: rows `| N | `spec.py`, `cases/` ... | ... |`, lowest first."""
    rows = re.findall(r"^\|\s*(\d+)\s*\|([^|]*)\|", DOC.read_text(encoding="utf-8"), re.M)
    assert rows, "docs/architecture.md has no layer table"
    names = {"__init__.py": "dlbench"}
    layers = []
    for number, cell in rows:
        assert int(number) == len(layers), f"docs/architecture.md: layer {number} is out of order"
        units = re.findall(r"`([\w.]+/?)`", cell)
        layers.append(tuple(sorted(names.get(u, "dlbench." + u.removesuffix("/").removesuffix(".py")) for u in units)))
    return tuple(layers)


def test_the_architecture_doc_shows_these_layers() -> None:
    assert _doc_layers() == tuple(tuple(sorted(units)) for units in LAYERS)


@pytest.mark.parametrize("command", ["dlbench.cli.run", "dlbench.cli.sweep"])
def test_run_and_sweep_commands_parse_call_and_render(command: str) -> None:
    """The run API (runapi/) prepares and executes; the command imports no launcher, store or max-batch search."""
    found = sorted(
        m
        for m in imports(MODULES[command], top_level_only=False)
        if m.startswith(("dlbench.launch", "dlbench.store", "dlbench.runapi.maxbatch", "dlbench.runapi.matrix"))
    )
    assert not found, f"{command} imports {found}"
