"""The framework tests' one interpreter fixture."""

from __future__ import annotations

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
