"""Fetch the wheels the offline GPU node needs (wheels.txt) or its image's packages for the rehearsal
(node-image.txt) from PyPI, as CPython 3.12 manylinux x86_64 wheels, into a folder; pins already there are not
fetched again, so a folder kept between runs is a cache (.ci/run keeps one under ~/.cache).

    python3 benchmarks/gpu/wheels.py DIR [--list node-image.txt] [--stamp]

--stamp also writes DIR/COMMIT: this checkout's commit and `git describe --always --dirty --tags`, which the node's
command copies into its tree (src/dlbench/COMMIT) when the tree came without .git, so that its points name it.
Exit 1 (one line) when pip cannot fetch a pin, or when pydantic's metadata names another pydantic-core than the
list pins (pydantic refuses to import beside any other).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
PYTHON_VERSION = "3.12"


def pins(listing: Path) -> list[tuple[str, str]]:
    """(name, version) of every `name==version` line of a list (comments and blank lines skipped)."""
    out = []
    for line in listing.read_text(encoding="utf-8").splitlines():
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        name, sep, version = text.partition("==")
        if not sep or not re.fullmatch(r"[A-Za-z0-9._-]+", name) or not re.fullmatch(r"[A-Za-z0-9.+!-]+", version):
            raise SystemExit(f"wheels.py: {listing.name}: not a pinned requirement: {text!r}")
        out.append((name, version))
    return out


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def present(folder: Path, name: str, version: str) -> Path | None:
    """The wheel of this pin already in the folder (`{name}-{version}-...whl`, names compared as PEP 503), or None."""
    for wheel in folder.glob("*.whl"):
        dist, _, rest = wheel.name.partition("-")
        if _norm(dist) == _norm(name) and rest.split("-", 1)[0] == version:
            return wheel
    return None


def fetch(folder: Path, wanted: list[tuple[str, str]]) -> None:
    """pip download the pins the folder lacks (no dependencies: the lists name every one)."""
    missing = [f"{n}=={v}" for n, v in wanted if present(folder, n, v) is None]
    if not missing:
        return
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
    command += ["--python-version", PYTHON_VERSION, "--implementation", "cp", "-d", str(folder)]
    for platform in PLATFORMS:
        command += ["--platform", platform]
    proc = subprocess.run([*command, *missing], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"wheels.py: pip could not fetch {' '.join(missing)}: {tail}")


def check_pydantic(folder: Path, wanted: list[tuple[str, str]]) -> None:
    """The pinned pydantic-core is the one the pinned pydantic's metadata requires."""
    versions = {_norm(n): v for n, v in wanted}
    if "pydantic" not in versions:
        return
    wheel = present(folder, "pydantic", versions["pydantic"])
    assert wheel is not None
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode()
    need = re.search(r"^Requires-Dist: pydantic-core\s*\(?==\s*([\w.]+)", text, re.MULTILINE)
    if need and need.group(1) != versions.get("pydantic_core"):
        raise SystemExit(
            f"wheels.py: pydantic {versions['pydantic']} needs pydantic-core {need.group(1)}, the list pins "
            f"{versions.get('pydantic_core')}"
        )


def stamp(folder: Path) -> None:
    """DIR/COMMIT: this checkout's commit and its description (nothing where it is not a git checkout)."""

    def git(*args: str) -> str:
        proc = subprocess.run(["git", "-C", str(HERE), *args], capture_output=True, text=True, check=False)
        return proc.stdout.strip() if proc.returncode == 0 else ""

    commit = git("rev-parse", "HEAD")
    if commit:
        (folder / "COMMIT").write_text(f"{commit}\n{git('describe', '--always', '--dirty', '--tags')}\n")


def main(argv: list[str] | None = None) -> int:
    """Fetch the list's wheels into DIR; exit 1 with one line when that fails."""
    p = argparse.ArgumentParser(prog="wheels.py", description=__doc__.split("\n\n")[0])
    p.add_argument("dir", type=Path)
    p.add_argument("--list", type=Path, default=HERE / "wheels.txt", help="wheels.txt (default) or node-image.txt")
    p.add_argument("--stamp", action="store_true", help="also write DIR/COMMIT (this checkout's commit)")
    a = p.parse_args(argv)
    listing = a.list if a.list.is_absolute() or a.list.exists() else HERE / a.list
    wanted = pins(listing)
    a.dir.mkdir(parents=True, exist_ok=True)
    try:
        fetch(a.dir, wanted)
        check_pydantic(a.dir, wanted)
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        return 1
    if a.stamp:
        stamp(a.dir)
    print(f"{len(wanted)} wheels in {a.dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
