"""Each point's request (store/request.py), filled in where it is launched: its run's command, dlbench's version
and commit, and the packages of the interpreter that runs it, read once per interpreter per process (never
inside a point's time)."""

from __future__ import annotations

import dataclasses
import email.parser
import functools
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

from dlbench import __version__, stamped_commit
from dlbench.analysis.memory import ESTIMATE_KEY, estimate
from dlbench.records import PointResult
from dlbench.store.request import Request, with_request
from dlbench.store.store import Store

# Every distribution an interpreter sees (the first of a name wins, as imports do), read from the headers of its
# METADATA alone: importlib.metadata's `metadata` parses the whole file, long description included, twice with
# `version` (about four times the CPU: 0.05-0.09 s against 0.02 s for 70-90 packages, measured on a loaded 2-core
# machine); the header parser gives the same Name and Version. LOCK_SCRIPT
# runs in the framework's interpreter (standard library only); `_distributions` is the same code in this one
# (tests/unit/launch/test_package_lock.py checks both against importlib.metadata's own reading).
LOCK_SCRIPT = (
    "import email.parser, importlib.metadata as m, json, platform\n"
    "seen, parse = {}, email.parser.HeaderParser().parsestr\n"
    "for d in m.distributions():\n"
    "    head = parse((d.read_text('METADATA') or d.read_text('PKG-INFO') or '').split('\\n\\n', 1)[0])\n"
    "    name = head['Name']\n"
    "    if name and name not in seen: seen[name] = head['Version']\n"
    "print(json.dumps({'python': platform.python_version(), 'packages': seen}))\n"
)
LOCK_TIMEOUT_S = 60.0


def _distributions() -> dict[str, str]:
    """LOCK_SCRIPT's answer for this interpreter."""
    seen: dict[str, str] = {}
    parse = email.parser.HeaderParser().parsestr
    for d in importlib.metadata.distributions():
        head = parse((d.read_text("METADATA") or d.read_text("PKG-INFO") or "").split("\n\n", 1)[0])
        name = head["Name"]
        if name and name not in seen:
            seen[name] = head["Version"]
    return seen


def _by_name(pair: tuple[str, str]) -> str:
    return pair[0].lower()


@functools.cache
def package_lock(python: str) -> tuple[str, tuple[tuple[str, str], ...], str]:
    """(Python version, sorted (name, version) pairs, '' or why no lock could be read) for an interpreter; this
    interpreter is read in-process, another through one child process."""
    if os.path.abspath(python) == os.path.abspath(sys.executable):  # a venv's python is a link: not resolved
        try:
            return platform.python_version(), tuple(sorted(_distributions().items(), key=_by_name)), ""
        except Exception as exc:
            return platform.python_version(), (), f"cannot read the packages: {type(exc).__name__}: {exc}"[:200]
    try:
        proc = subprocess.run(
            [python, "-c", LOCK_SCRIPT], capture_output=True, text=True, timeout=LOCK_TIMEOUT_S, check=False
        )
        answer = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 and proc.stdout else None
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        return "", (), f"{python} could not list its packages: {type(exc).__name__}"
    if not isinstance(answer, dict):
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1][:160]
        return "", (), f"{python} could not list its packages (exit {proc.returncode}: {tail})"
    pairs = ((str(k), str(v)) for k, v in answer["packages"].items())
    return str(answer.get("python", "")), tuple(sorted(pairs, key=_by_name)), ""


@functools.lru_cache(maxsize=1)
def dlbench_commit() -> str:
    """`git describe --always --dirty --tags` of the checkout dlbench runs from; where it is not one, the one
    stamped in the tree when it was copied without .git (dlbench.COMMIT_FILE); else ''."""
    here = Path(__file__).resolve().parents[1]
    try:
        out = subprocess.run(
            ["git", "-C", str(here), "describe", "--always", "--dirty", "--tags"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return stamped_commit(describe=True)
    return out.stdout.strip() if out.returncode == 0 else stamped_commit(describe=True)


def request_for(store: Store, run_id: str, result: PointResult, python: str | None) -> Request:
    """The request of a point of this run that `python` ran (None: it never ran, e.g. its framework is missing);
    a max-batch search's run names in its meta the command that asked for it."""
    run = store.get_run(run_id)
    version, packages, error = package_lock(python) if python else ("", (), "the point never reached an interpreter")
    sweep = run.kind == "sweep"
    return Request(
        command=str(run.meta.get("command") or run.command),
        kind=run.kind,
        suite=str(run.meta.get("suite_name", "")) if sweep else "",
        suite_point=result.spec.key() if sweep else "",
        dlbench_version=__version__,
        dlbench_commit=dlbench_commit(),
        python=python or "",
        python_version=version,
        packages=packages,
        lock_error=error,
        forced=str(run.meta.get("forced") or ""),
    )


def attach_request(store: Store, run_id: str, result: PointResult, python: str | None) -> PointResult:
    """The point with its request and the memory it was estimated to need (analysis/memory.py), ready to be
    stored in this run: every path that stores a point (run, sweep, a max search's probes, rerun) comes here."""
    found = estimate(result.spec)
    if found is not None:
        result = dataclasses.replace(result, extra={**result.extra, ESTIMATE_KEY: found.to_dict()})
    return with_request(result, request_for(store, run_id, result, python))
