"""Which Python interpreter runs a framework's worker: its registered environment, or this one."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from dlbench.backends import BackendInfo, get_info
from dlbench.launch import venvs as envs


class NotInstalled(Exception):
    """The framework is in no environment dlbench knows; the message says how to install it."""


@dataclass(frozen=True)
class FrameworkState:
    """Where a framework is installed, as `dlbench list` shows it."""

    name: str
    version: str | None
    python: str
    where: str  # "env <folder>", "this interpreter", or "" when absent
    reason: str = ""
    cases: dict[str, object] = field(default_factory=dict)

    @property
    def installed(self) -> bool:
        """Whether some interpreter has the framework."""
        return bool(self.python)


def _missing(framework: str) -> str:
    return f"not installed: run: dlbench setup {framework}"


def state(framework: str) -> FrameworkState:
    """The registered environment first (if its python exists), else this interpreter, else absent."""
    info: BackendInfo = get_info(framework)
    if info.unavailable:
        return FrameworkState(framework, None, "", "", reason=info.unavailable)
    try:
        rec = envs.get(framework)
    except envs.EnvError as exc:
        return FrameworkState(framework, None, "", "", reason=str(exc))
    stale = envs.stale_source(rec, info.extra) if rec is not None and rec.python_exists() else None
    if stale:
        return FrameworkState(framework, None, "", "", reason=f"{stale}: run: dlbench setup {framework}")
    if rec is not None and rec.python_exists():
        return FrameworkState(framework, rec.version or None, rec.python, f"env {Path(rec.python).parents[1]}",
                              cases=rec.cases)
    version = info.installed_version()
    if version is not None:
        return FrameworkState(framework, version, sys.executable, "this interpreter")
    if rec is not None:
        return FrameworkState(framework, None, "", "", reason=f"its environment's python {rec.python} is gone: "
                                                              f"run: dlbench setup {framework}")
    return FrameworkState(framework, None, "", "", reason=_missing(framework))


def interpreter_for(framework: str) -> str:
    """The interpreter whose environment has the framework; raises NotInstalled with the fix."""
    info = get_info(framework)
    if info.unavailable:
        raise NotInstalled(f"framework {framework} is {info.unavailable}")
    st = state(framework)
    if st.installed:
        return st.python
    raise NotInstalled(f"framework {framework} is {st.reason}" if st.reason.startswith("not installed")
                       else f"framework {framework}: {st.reason}")


def installed(framework: str) -> bool:
    """Whether interpreter_for would find the framework."""
    return state(framework).installed


def framework_status(framework: str) -> tuple[str | None, str, str]:
    """(version or None, interpreter or '', reason when absent) for `dlbench list`."""
    st = state(framework)
    return st.version, st.python, st.reason
