"""The framework tests' fixtures: the one interpreter fixture, and a store per file for its multi-rank points."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.frameworks import interpreter_or_skip


@pytest.fixture(scope="module")
def framework_python(request: pytest.FixtureRequest) -> str:
    """The interpreter of a framework's environment, or a skip naming the missing environment. The framework is
    the test's parameter (the framework table's rows, `indirect`), else the name in its `framework(name)` mark."""
    name = getattr(request, "param", None)
    if name is None:
        mark = request.node.get_closest_marker("framework")
        assert mark is not None, f"{request.node.nodeid}: framework_python needs a framework(name) mark or parameter"
        name = mark.args[0]
    return interpreter_or_skip(name)


@pytest.fixture(scope="module")
def scale_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One store for a file's multi-rank tests, so the 1-device point they divide by is measured once."""
    return tmp_path_factory.mktemp("scale") / "results.db"
