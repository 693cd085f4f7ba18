"""One path from a request to measured points (#43): points.py is the only code that makes a PointSpec from its parts,
and the run API (runapi/) is the only code that starts a launcher, so a rule added to its gate holds for every
command that runs points. Read from the source's syntax trees, as test_imports.py reads the import graph."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.unit.test_imports import MODULES, imports

# The entry points that start a point's ranks: launch/point.py's execute (a launcher's launch) and
# launch/session.py's run_points over it.
STARTERS = ("dlbench.launch.point", "dlbench.launch.session")


def _calls(module: str) -> list[ast.Call]:
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)]


def _called_name(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def test_one_place_makes_a_point_spec() -> None:
    sites = sorted(f"{m}:{c.lineno}" for m in MODULES for c in _calls(m) if _called_name(c) == "PointSpec")
    assert [s.split(":")[0] for s in sites] == ["dlbench.points"], sites


def test_the_benchmarks_and_scripts_build_points_through_points_py() -> None:
    root = Path(__file__).resolve().parents[2]
    files = [f for folder in ("benchmarks", "scripts") for f in sorted((root / folder).rglob("*.py"))]
    assert any(f.name == "startup.py" for f in files)  # the test reads the real folders
    sites = [
        f"{f.relative_to(root)}:{n.lineno}"
        for f in files
        for n in ast.walk(ast.parse(f.read_text(encoding="utf-8")))
        if isinstance(n, ast.Call) and _called_name(n) == "PointSpec"
    ]
    assert not sites, f"{sites} make a PointSpec from its parts: build it with dlbench.points.point"


def test_nothing_outside_the_run_api_starts_a_launcher() -> None:
    importers = sorted(m for m in MODULES if any(i in STARTERS for i in imports(MODULES[m], top_level_only=False)))
    outside = [m for m in importers if not m.startswith("dlbench.runapi.") and m != "dlbench.launch.session"]
    assert not outside, f"{outside} start points themselves: go through the run API (runapi/)"
    assert {m.split(".")[1] for m in importers} == {"runapi", "launch"}  # the test sees the real importers
    # inside launch/, each Launcher's launch() places ranks and execute() calls it; nothing else calls one
    launching = sorted({m for m in MODULES for c in _calls(m) if _called_name(c) == "launch"})
    assert "dlbench.launch.point" in launching and all(m.startswith("dlbench.launch.") for m in launching), launching


def _third_party(module: str) -> set[str]:
    """The top-level packages a module imports, anywhere in it."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module and not n.level}
    return {name.split(".")[0] for name in names}


def test_no_console_below_the_cli() -> None:
    """A live console (rich) is the CLI's; report/ uses rich's tables to render, and nothing else holds one (setup
    talks through envs.provision.Feedback, which the CLI backs with a console)."""
    users = sorted(m for m in MODULES if "rich" in _third_party(m))
    below = [m for m in users if m.split(".")[1] not in ("cli", "report")]
    assert not below, f"{below} hold a console below the CLI: take a callback or a Feedback instead"
    assert any(m.startswith("dlbench.cli.") for m in users)  # the test sees the real importers
