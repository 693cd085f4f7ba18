"""Which Python interpreter runs a framework's worker: this one, or a per-framework environment."""

from __future__ import annotations

import sys

from dlbench.backends import BackendInfo, get_info


class NotInstalled(Exception):
    """The framework is in no environment dlbench knows; the message says how to install it."""


def interpreter_for(framework: str) -> str:
    """The interpreter whose environment has the framework; raises NotInstalled with the fix."""
    info: BackendInfo = get_info(framework)
    if info.unavailable:
        raise NotInstalled(f"framework {framework} is {info.unavailable}")
    if info.installed_version() is not None:
        return sys.executable
    raise NotInstalled(f"framework {framework} is not installed: pip install 'dlbench[{info.extra}]'")


def framework_status(framework: str) -> tuple[str | None, str, str]:
    """(version or None, interpreter or '', reason when absent) for `dlbench list`."""
    info = get_info(framework)
    if info.unavailable:
        return None, "", info.unavailable
    version = info.installed_version()
    if version is not None:
        return version, sys.executable, ""
    return None, "", f"not installed: pip install 'dlbench[{info.extra}]'"
