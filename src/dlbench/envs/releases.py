"""A framework's releases (#49): what pip installs for one release (the framework's extra with its release packages
pinned to it), which releases the package index offers and for which Python, and their order. Asked of pip
(`pip index versions`) by `dlbench setup FW==VERSION` and by `dlbench bisect --releases index`; nothing here
downloads a package."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from dlbench.backends import BackendInfo
from dlbench.envs.interpreters import Interpreter, choose, discover, misfit, probe, range_text, supported
from dlbench.spec import release_key


class ReleaseError(Exception):
    """A release cannot be installed or listed as asked; the message is one line."""


def ordered(releases: Iterable[str]) -> list[str]:
    """Releases, each once, oldest first."""
    return sorted(dict.fromkeys(releases), key=release_key)


_EXTRA = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


def _extra_requirements(extra: str, seen: frozenset[str] = frozenset()) -> list[tuple[Requirement, str]]:
    """dlbench's requirements for an extra, as (requirement, the extra naming it); dlbench[X] inside an extra (the
    GPU builds' `dlbench[jax]`) is followed."""
    try:
        lines = importlib.metadata.requires("dlbench") or []
    except importlib.metadata.PackageNotFoundError:
        raise ReleaseError("dlbench's own package metadata is missing: install it (pip install -e .)") from None
    out: list[tuple[Requirement, str]] = []
    for line in lines:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is None or extra not in _EXTRA.findall(str(req.marker)):
            continue
        if canonicalize_name(req.name) == "dlbench":
            out += [r for x in sorted(req.extras) if x not in seen for r in _extra_requirements(x, seen | {extra})]
        else:
            out.append((req, extra))
    return out


def requirements(
    info: BackendInfo, release: str, extra: str, python: tuple[int, int, int]
) -> tuple[list[str], list[str]]:
    """pip requirements installing one release of a framework beside dlbench (installed without an extra): the
    extra's requirements that apply on that Python, each of the framework's release packages (jax and jaxlib)
    pinned to the release, the others (flax, optax ...) as the extra pins them; and the names pinned."""
    pins = {canonicalize_name(d) for d in info.release_packages}
    env: dict[str, str] = {str(k): str(v) for k, v in default_environment().items()}
    env.update(python_version=f"{python[0]}.{python[1]}", python_full_version=".".join(map(str, python)))
    out: list[str] = []
    pinned: list[str] = []
    for req, from_extra in _extra_requirements(extra):
        if req.marker is not None and not req.marker.evaluate({**env, "extra": from_extra}):
            continue
        req.marker = None
        name = canonicalize_name(req.name)
        if name in pins:
            req.specifier = SpecifierSet(f"=={release}")
            pinned += [] if req.name in pinned else [req.name]
        text = str(req)
        if text not in out:
            out.append(text)
    if not pinned:
        raise ReleaseError(f"{info.name}: its extra {extra!r} names none of {', '.join(sorted(pins))} to pin")
    return out, pinned


Runner = Callable[[Sequence[str]], subprocess.CompletedProcess[str]]


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv), capture_output=True, text=True, timeout=120, check=False, stdin=subprocess.DEVNULL
    )


def _parse_index(out: str) -> list[str]:
    """The versions `pip index versions` printed: its JSON (--json), else its 'Available versions:' line."""
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                return [str(v) for v in json.loads(line).get("versions", [])]
            except (ValueError, AttributeError):
                continue
        if line.startswith("Available versions:"):
            return [v.strip() for v in line.partition(":")[2].split(",") if v.strip()]
    return []


def offered(distribution: str, minor: tuple[int, int] | None = None, run: Runner = _run) -> list[str]:
    """The releases of a distribution the package index offers (for a Python minor: a wheel or sdist that Python
    takes), oldest first; ReleaseError (one line) when pip cannot ask."""
    argv = [sys.executable, "-m", "pip", "index", "versions", distribution, "--json"]
    if minor is not None:
        tag = f"{minor[0]}{minor[1]}"
        argv += ["--python-version", f"{minor[0]}.{minor[1]}", "--implementation", "cp", "--abi", f"cp{tag}"]
    try:
        proc = run(argv)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ReleaseError(f"`pip index versions {distribution}` could not run: {exc}") from None
    if proc.returncode != 0 and "--json" in (proc.stderr or ""):  # a pip older than --json
        proc = run([a for a in argv if a != "--json"])
    versions = _parse_index(proc.stdout or "")
    if proc.returncode != 0 and not versions:
        tail = (proc.stderr or "").strip().splitlines()[-1:] or ["no output"]
        if "No matching distribution" in tail[0]:
            return []
        raise ReleaseError(f"`pip index versions {distribution}` failed: {tail[0][:200]}")
    return ordered(versions)


def offers(packages: Sequence[str], release: str, minor: tuple[int, int], run: Runner = _run) -> bool:
    """Whether the index has each of the packages (a framework's release packages) at that release for that
    Python."""
    return all(release in offered(d, minor, run) for d in packages)


def choose_for_release(
    info: BackendInfo, release: str, build: str, request: str | None, run: Runner = _run
) -> Interpreter:
    """The interpreter a release's environment is made from: the one named (checked to take the release), else the
    first that choose() would pick whose Python the index has the release's wheels for (this one first, then the
    newest found); ReleaseError naming the Pythons that would take it when none found here does."""
    extra = info.cuda_extra if build == "cuda" and info.cuda_extra else info.extra
    if request is not None:
        found = [choose(info, request)]
    else:
        unique: dict[str, Interpreter] = {}  # this interpreter first, then the newest found
        for i in [probe(sys.executable), *discover()]:
            if i is not None and misfit(info, i.minor) is None:
                unique.setdefault(os.path.realpath(i.path), i)
        found = list(unique.values())
    tried: list[str] = []
    for interp in found:
        packages = requirements(info, release, extra, interp.version)[1]
        if offers(packages, release, interp.minor, run):
            return interp
        tried.append(interp.label)
    lo, hi = supported(info)
    minors = [(3, m) for m in range(lo[1], hi[1] + 1)]
    fits = [f"3.{m[1]}" for m in minors if offers(requirements(info, release, extra, (*m, 0))[1], release, m, run)]
    if not fits:
        raise ReleaseError(f"the package index has no {info.name} {release} for Python {range_text(info)}")
    here = f"Python {', '.join(tried)} found here" if tried else "no Python found here"
    raise ReleaseError(
        f"{info.name} {release} has wheels for Python {', '.join(fits)}, not for the {here}: "
        f"install one (`uv python install {fits[-1]}`) or name it: dlbench setup {info.name}=={release} --python PATH"
    )


def in_range(releases: Sequence[str], low: str, high: str) -> list[str]:
    """The releases from low to high (both included, and both required), oldest first; a pre-release only where an
    end is one."""
    lo, hi = release_key(low), release_key(high)
    if lo >= hi:
        raise ReleaseError(f"--versions {low}..{high}: the first release must be older than the second")
    pre = _prerelease(low) or _prerelease(high)
    return [r for r in ordered([low, *releases, high]) if lo <= release_key(r) <= hi and (pre or not _prerelease(r))]


def _prerelease(release: str) -> bool:
    key = release_key(release)[1]
    return isinstance(key, Version) and key.is_prerelease


_RANGE = re.compile(r"^\s*([^.\s][^\s]*?)\s*\.\.\s*([^\s]+)\s*$")


def parse_versions(text: str) -> tuple[tuple[str, str] | None, tuple[str, ...]]:
    """--versions 'A..B' -> ((A, B), ()); 'a,b,c' -> (None, (a, b, c)) in the order given."""
    m = _RANGE.match(text)
    if m:
        return (m.group(1), m.group(2)), ()
    items = tuple(v.strip() for v in text.split(",") if v.strip())
    return None, items


__all__ = [
    "ReleaseError",
    "choose_for_release",
    "in_range",
    "offered",
    "offers",
    "ordered",
    "parse_versions",
    "requirements",
]
