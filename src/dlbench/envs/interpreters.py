"""Which Python interpreter runs a framework's worker (its registered environment, or this one), and which
interpreter a new environment is made from: a version or path the user names, else one found on PATH, in pyenv
or through uv that the framework's pinned wheels support."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from dlbench.backends import BackendInfo, get_info
from dlbench.envs import venvs as envs


class NotInstalled(Exception):
    """The framework is in no environment dlbench knows; the message says how to install it."""


class NoInterpreter(Exception):
    """No interpreter fits, or the one named does not; the message is one line with the fix."""


DLBENCH_PYTHON = (3, 10)  # dlbench's own requires-python (pyproject.toml); a test keeps them equal
_VERSION = re.compile(r"^(\d+)\.(\d+)$")
_PATH_NAME = re.compile(r"^python3(\.\d+)?$")
# Runs on any interpreter, 2.7 included: what it is.
_WHO = (
    "import sys, json; print(json.dumps({'version': list(sys.version_info[:3]), "
    "'impl': getattr(getattr(sys, 'implementation', None), 'name', 'cpython'), 'executable': sys.executable}))"
)


@dataclass(frozen=True)
class Interpreter:
    """A Python interpreter that answered: its path and version."""

    path: str
    version: tuple[int, int, int]
    impl: str = "cpython"

    @property
    def minor(self) -> tuple[int, int]:
        """(major, minor)."""
        return self.version[0], self.version[1]

    @property
    def label(self) -> str:
        """e.g. '3.12.1'."""
        return ".".join(map(str, self.version))


def _minor(text: str) -> tuple[int, int]:
    major, minor = text.split(".")[:2]
    return int(major), int(minor)


def _dotted(v: tuple[int, ...]) -> str:
    return ".".join(map(str, v))


def supported(info: BackendInfo) -> tuple[tuple[int, int], tuple[int, int]]:
    """The (oldest, newest) Python minor a framework's environment may use: its wheels' range, from dlbench's own
    floor up."""
    lo, hi = _minor(info.python[0]), _minor(info.python[1])
    return max(lo, DLBENCH_PYTHON), hi


def range_text(info: BackendInfo) -> str:
    """The framework's supported range as the user reads it, e.g. '3.11-3.14'."""
    lo, hi = supported(info)
    return _dotted(lo) if lo == hi else f"{_dotted(lo)}-{_dotted(hi)}"


def misfit(info: BackendInfo, minor: tuple[int, int]) -> str | None:
    """Why a Python minor cannot hold the framework's environment (too new, too old), or None."""
    lo, hi = supported(info)
    if minor > hi:
        return f"Python {_dotted(minor)} is too new for {info.name} (it supports {range_text(info)})"
    if minor < _minor(info.python[0]):
        return f"Python {_dotted(minor)} is too old for {info.name} (it supports {range_text(info)})"
    if minor < lo:
        return (
            f"Python {_dotted(minor)} is too old for dlbench (it needs >= {_dotted(DLBENCH_PYTHON)}; "
            f"{info.name} supports {range_text(info)} with it)"
        )
    return None


def probe(python: str, timeout: float = 15) -> Interpreter | None:
    """Run an interpreter to learn its version; None if it is no working Python."""
    try:
        proc = subprocess.run(
            [python, "-c", _WHO],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
            cwd="/",
        )
        answer = json.loads(proc.stdout.strip().splitlines()[-1])
        major, minor, micro = (int(x) for x in answer["version"])
        return Interpreter(str(answer.get("executable") or python), (major, minor, micro), str(answer["impl"]))
    except (OSError, subprocess.SubprocessError, ValueError, KeyError, IndexError, TypeError):
        return None


def candidates(environ: Mapping[str, str] | None = None) -> list[str]:
    """Interpreter paths to try: python3 and python3.N on PATH, then every pyenv version's bin/python."""
    env = os.environ if environ is None else environ
    root = Path(env.get("PYENV_ROOT") or Path(env.get("HOME") or Path.home()) / ".pyenv")
    found: list[str] = []
    for folder in env.get("PATH", "").split(os.pathsep):
        if Path(folder or ".").resolve() == (root / "shims").resolve():
            continue  # pyenv's shims run its versions, which are read below
        try:
            names = sorted(os.listdir(folder or "."))
        except OSError:
            continue
        found += [os.path.join(folder, n) for n in names if _PATH_NAME.match(n)]
    if (root / "versions").is_dir():
        found += [
            str(p / "bin" / "python") for p in sorted((root / "versions").iterdir()) if (p / "bin" / "python").is_file()
        ]
    unique: dict[str, str] = {}  # one path per real file (python3 and python3.11 are often one)
    for p in found:
        if os.access(p, os.X_OK):
            unique.setdefault(os.path.realpath(p), p)
    return list(unique.values())


def _uv_find(request: str, environ: Mapping[str, str] | None) -> str | None:
    """`uv python find REQUEST` where uv is installed: one installed interpreter's path, or None."""
    env = dict(os.environ if environ is None else environ)
    uv = shutil.which("uv", path=env.get("PATH"))
    if uv is None:
        return None
    try:
        proc = subprocess.run(
            [uv, "python", "find", request],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
            stdin=subprocess.DEVNULL,
            env=env,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    path = proc.stdout.strip().splitlines()[-1] if proc.returncode == 0 and proc.stdout.strip() else ""
    return path or None


def discover(environ: Mapping[str, str] | None = None) -> list[Interpreter]:
    """Every CPython found on PATH and in pyenv that answers, one per real executable, newest first."""
    seen: dict[str, Interpreter] = {}
    for path in candidates(environ):
        found = probe(path)
        if found is not None and found.impl == "cpython":
            seen.setdefault(os.path.realpath(found.path), found)
    return sorted(seen.values(), key=lambda i: i.version, reverse=True)


def _fix(info: BackendInfo, minor: tuple[int, int] | None = None) -> str:
    want = _dotted(minor or supported(info)[1])
    return f"install one (`uv python install {want}`) or name it: dlbench setup {info.name} --python PATH"


def choose(info: BackendInfo, request: str | None, environ: Mapping[str, str] | None = None) -> Interpreter:
    """The interpreter a framework's new environment is made from; NoInterpreter (one line) when none fits.

    request: 'X.Y' (the newest X.Y.* found), a path or a command name, or None. With None, the interpreter dlbench
    runs on where the framework supports it (the wheels CI and the pins were tried with), else the newest one
    found on PATH, in pyenv or through `uv python find` that it supports."""
    lo, hi = supported(info)
    if request is None:
        here = probe(sys.executable)
        if here is not None and misfit(info, here.minor) is None:
            return here
        for found in discover(environ):
            if misfit(info, found.minor) is None:
                return found
        uv = _uv_find(f">={_dotted(lo)},<{hi[0]}.{hi[1] + 1}", environ)
        via_uv = probe(uv) if uv else None
        if via_uv is not None and misfit(info, via_uv.minor) is None:
            return via_uv
        raise NoInterpreter(
            f"{info.name} needs Python {range_text(info)} and none was found on PATH, in pyenv "
            f"or through uv: {_fix(info)}"
        )
    match = _VERSION.match(request)
    if match:
        minor = (int(match.group(1)), int(match.group(2)))
        reason = misfit(info, minor)
        if reason:
            raise NoInterpreter(reason)
        for found in discover(environ):
            if found.minor == minor:
                return found
        uv = _uv_find(request, environ)
        via_uv = probe(uv) if uv else None
        if via_uv is not None and via_uv.minor == minor:
            return via_uv
        raise NoInterpreter(f"no Python {request} found on PATH, in pyenv or through uv: {_fix(info, minor)}")
    return named(info, request, environ)


def named(info: BackendInfo, request: str, environ: Mapping[str, str] | None = None) -> Interpreter:
    """The interpreter at a path (or a command on PATH), checked against the framework's range."""
    env = os.environ if environ is None else environ
    path = request if os.sep in request else shutil.which(request, path=env.get("PATH"))
    if not path or not Path(path).is_file():
        if request[:1].isdigit():
            raise NoInterpreter(
                f"unknown Python version {request!r}: give X.Y (e.g. {_dotted(supported(info)[1])}) "
                f"or an interpreter's path"
            )
        raise NoInterpreter(f"no Python interpreter at {request!r}: give a version X.Y or an interpreter's path")
    found = probe(path)
    if found is None:
        raise NoInterpreter(f"{request} is not a working Python interpreter")
    if found.impl != "cpython":
        raise NoInterpreter(f"{request} is {found.impl}, not CPython: {info.name}'s wheels are CPython's")
    reason = misfit(info, found.minor)
    if reason:
        raise NoInterpreter(f"{request}: {reason}")
    return Interpreter(path, found.version, found.impl)


@dataclass(frozen=True)
class FrameworkState:
    """Where a framework is installed, as `dlbench list` shows it."""

    name: str
    version: str | None
    python: str
    where: str  # "env <folder>", "existing <python>", "this interpreter", or "" when absent
    reason: str = ""
    cases: dict[str, object] = field(default_factory=dict)
    python_version: str = ""  # e.g. "3.12.1"; "" when unknown
    build: str = ""  # "cpu", "cuda", or "" when unknown
    release: str = ""  # the release asked for (jax==0.10.1), "" for the framework's default environment

    @property
    def installed(self) -> bool:
        """Whether some interpreter has the framework."""
        return bool(self.python)


def _missing(framework: str) -> str:
    return f"not installed: run: dlbench setup {framework}"


def state(framework: str, release: str | None = None) -> FrameworkState:
    """The registered environment first (if its python exists), else this interpreter, else absent. With a release
    (jax==0.10.1): that release's environment, else the default one where it holds that release; a test backend
    (no pip extra: the fake one) takes any release in this interpreter."""
    info: BackendInfo = get_info(framework)
    if release is not None:
        return _release_state(info, release)
    if info.unavailable:
        return FrameworkState(framework, None, "", "", reason=info.unavailable)
    try:
        rec = envs.get(framework)
    except envs.EnvError as exc:
        return FrameworkState(framework, None, "", "", reason=str(exc))
    if rec is not None and rec.python_exists():
        return _recorded(rec, info)
    version = info.installed_version()
    if version is not None:
        return FrameworkState(
            framework,
            version,
            sys.executable,
            "this interpreter",
            python_version=_dotted(sys.version_info[:3]),
            build=build_of(version),
        )
    if rec is not None:
        return FrameworkState(
            framework,
            None,
            "",
            "",
            reason=f"its environment's python {rec.python} is gone: run: dlbench setup {framework}",
        )
    return FrameworkState(framework, None, "", "", reason=_missing(framework))


def _recorded(rec: envs.EnvRecord, info: BackendInfo) -> FrameworkState:
    """A registered environment whose python exists, or why it cannot be used (set up from another checkout)."""
    stale = envs.stale_source(rec, info.extra)
    if stale:
        return FrameworkState(rec.framework, None, "", "", reason=f"{stale}: run: dlbench setup {rec.key}")
    where = f"existing {rec.python}" if rec.existing else f"env {Path(rec.python).parents[1]}"
    return FrameworkState(
        rec.framework,
        rec.version or None,
        rec.python,
        where,
        cases=rec.cases,
        python_version=rec.python_version,
        build=rec.build,
        release=rec.release,
    )


def same_release(installed: str | None, release: str) -> bool:
    """Whether an installed version is the release asked for: equal, or the same with a local label (2.13.0+cpu)."""
    return installed is not None and (installed == release or installed.partition("+")[0] == release)


def _release_state(info: BackendInfo, release: str) -> FrameworkState:
    """Where a framework's release is installed: its own environment, else the default one if it holds it."""
    name = info.name
    if not info.extra and not info.unavailable:  # a test backend: no environments, any release runs here
        return FrameworkState(
            name, release, sys.executable, "this interpreter (a test backend)", release=release, build="cpu"
        )
    try:
        rec = envs.get(name, release)
    except envs.EnvError as exc:
        return FrameworkState(name, None, "", "", reason=str(exc), release=release)
    if rec is not None and rec.python_exists():
        return _recorded(rec, info)
    default = state(name)
    if default.installed and same_release(default.version, release):
        return dataclasses.replace(default, release=release)
    held = f" (its default environment holds {default.version})" if default.installed else ""
    return FrameworkState(
        name, None, "", "", reason=f"not installed{held}: run: dlbench setup {name}=={release}", release=release
    )


def interpreter_for(framework: str, release: str | None = None) -> str:
    """The interpreter whose environment has the framework (that release of it); raises NotInstalled with the fix."""
    info = get_info(framework)
    if info.unavailable:
        raise NotInstalled(f"framework {framework} is {info.unavailable}")
    st = state(framework, release)
    if st.installed:
        return st.python
    label = f"{framework}=={release}" if release else framework
    raise NotInstalled(
        f"framework {label} is {st.reason}"
        if st.reason.startswith("not installed")
        else f"framework {label}: {st.reason}"
    )


def installed(framework: str, release: str | None = None) -> bool:
    """Whether interpreter_for would find the framework (that release of it)."""
    return state(framework, release).installed


def build_of(version: str, distributions: tuple[str, ...] = ()) -> str:
    """'cuda', 'cpu' or '' (unknown) from what pip knows, without importing the framework: a local version label
    (+cpu, +cu128), a -cpu or -gpu distribution, or NVIDIA's CUDA wheels beside it."""
    label = version.partition("+")[2].lower()
    names = [d.lower().replace("_", "-") for d in distributions]
    if label.startswith("cu") or any(
        n.endswith("-gpu") or "cuda" in n or re.match(r"nvidia-.*-cu\d", n) for n in names
    ):
        return "cuda"
    if label.startswith("cpu") or any(n.endswith("-cpu") for n in names):
        return "cpu"
    return ""
