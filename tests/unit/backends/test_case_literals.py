"""Cases own the 'what': no backend names a case as a string literal outside its MODELS table (issue #11), so a
new case touches its case file plus one MODELS entry per backend, and nothing else in a backend."""

from __future__ import annotations

import ast

from dlbench.cases import all_cases
from tests.support.paths import REPO

BACKENDS = REPO / "src" / "dlbench" / "backends"


def _table_nodes(tree: ast.Module) -> set[int]:
    """ids of every node inside a module-level `MODELS = {...}` (or annotated) assignment, or `__all__` (whose
    strings are function names, such as alexnet, not references to a case)."""
    inside: set[int] = set()
    for node in tree.body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id in ("MODELS", "__all__") for t in targets):
            inside |= {id(n) for n in ast.walk(node)}
    return inside


def case_literals() -> list[str]:
    """'file:line: name' for every case name written as a string outside a MODELS table."""
    names = {c.name for c in all_cases()}
    found = []
    for path in sorted(BACKENDS.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        allowed = _table_nodes(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in names and id(node) not in allowed:
                found.append(f"{path.relative_to(BACKENDS)}:{node.lineno}: {node.value}")
    return found


def test_no_case_name_outside_a_model_table() -> None:
    assert case_literals() == []


def test_the_check_sees_a_literal() -> None:
    tree = ast.parse("MODELS = {'resnet50': 1}\nif name == 'resnet50':\n    pass\n")
    table = _table_nodes(tree)
    outside = [
        n for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value == "resnet50" and id(n) not in table
    ]
    assert len(outside) == 1 and outside[0].lineno == 2
