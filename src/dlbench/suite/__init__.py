"""Suite files: a benchmark matrix as axes and exclusions (YAML), validated, expanded into points.

Built-in suites live beside this module in builtin/<name>.yaml; `dlbench sweep NAME|FILE` runs one.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from dlbench.suite.schema import Suite, SuiteError, load_suite_file, parse_suite


def builtin_names() -> list[str]:
    """Names of the suites shipped with dlbench."""
    folder = resources.files("dlbench.suite") / "builtin"
    return sorted(p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml"))


def load(name_or_path: str) -> Suite:
    """A built-in suite by name, or a suite file by path; SuiteError naming the known suites otherwise."""
    if name_or_path in builtin_names():
        res = resources.files("dlbench.suite") / "builtin" / f"{name_or_path}.yaml"
        return parse_suite(res.read_text(encoding="utf-8"), f"{name_or_path} (built-in)")
    path = Path(name_or_path)
    if path.is_file():
        return load_suite_file(path)
    raise SuiteError(f"no suite {name_or_path!r}: give a suite file or one of {', '.join(builtin_names())}")


__all__ = ["Suite", "SuiteError", "builtin_names", "load", "load_suite_file", "parse_suite"]
