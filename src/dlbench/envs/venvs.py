"""Per-framework environments: one venv per framework under the dlbench home, one more per framework release set up
(`dlbench setup jax==0.10.1`, #49), and their registry.

Layout: ``$DLBENCH_HOME`` (default ``~/.dlbench``) holds ``envs/<framework>/`` (a venv), ``envs/<framework>-<release>/``
(a release's venv), ``envs.json`` (``{framework or framework==release: {"python": ..., "version": ..., "created": ...,
"source": ..., "cases": {...}, "python_version": ..., "build": "cpu"|"cuda", "existing": bool}}``) and ``logs/``.
The registry is rewritten atomically (temporary file + rename) under an exclusive lock, so that several
``dlbench setup`` commands may run at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from dlbench.paths import home
from dlbench.spec import SpecError, release_label, split_release

REGISTRY_VERSION = 1
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
_EXTRAS = re.compile(r"\[[^\]]*\]")
_PROJECT_NAME = re.compile(r'^name\s*=\s*"dlbench"\s*$', re.MULTILINE)  # tomllib is 3.11+


class EnvError(Exception):
    """The registry cannot be read or written, or a name is unusable; the message is one line."""


@dataclass(frozen=True)
class EnvRecord:
    """One framework's environment as the registry keeps it."""

    framework: str
    python: str
    version: str
    created: str
    source: str = ""
    cases: dict[str, object] = field(default_factory=dict)
    python_version: str = ""  # the interpreter's X.Y.Z
    build: str = ""  # "cpu" or "cuda" ("" where unknown)
    existing: bool = False  # an interpreter dlbench registered but did not make (`setup --existing`)
    release: str = ""  # the release this environment was set up for (jax==0.10.1); "" for the framework's default

    @property
    def key(self) -> str:
        """Its name in the registry: 'jax', or 'jax==0.10.1' for a release's environment."""
        return release_label(self.framework, self.release or None)

    def python_exists(self) -> bool:
        """Whether the environment's interpreter is still there."""
        return Path(self.python).is_file() and os.access(self.python, os.X_OK)

    def to_json(self) -> dict[str, object]:
        """The registry entry (the framework is the key, so it is left out)."""
        d = asdict(self)
        d.pop("framework")
        d.pop("release")  # the key says it
        return d


def source_root() -> Path | None:
    """The checkout dlbench runs from (the folder with dlbench's pyproject.toml above the package), or None."""
    import dlbench

    for folder in Path(dlbench.__file__).resolve().parents[1:4]:
        meta = folder / "pyproject.toml"
        if meta.is_file():
            try:
                text = meta.read_text(encoding="utf-8")
            except OSError:
                return None
            return folder if _PROJECT_NAME.search(text) else None
    return None


def install_source(extra: str) -> list[str]:
    """pip arguments installing this dlbench with an extra: editable from this checkout, else pinned."""
    from dlbench import __version__

    root, extras = source_root(), f"[{extra}]" if extra else ""
    if root is not None:
        return ["-e", f"{root}{extras}"]
    return [f"dlbench{extras}=={__version__}"]


def stale_source(rec: EnvRecord, extra: str) -> str | None:
    """Why an environment would run another dlbench than this one (set up from another checkout or
    version), or None. Records without a source (older registries) are trusted."""
    want = " ".join(install_source(extra))
    if not rec.source or _EXTRAS.sub("", rec.source) == _EXTRAS.sub("", want):
        return None  # the extra may differ: a GPU build's, or none for an existing interpreter
    return f"its environment runs dlbench from {rec.source!r}, not from this one ({want!r})"


def registry_path() -> Path:
    """The registry file."""
    return home() / "envs.json"


def logs_dir() -> Path:
    """Where full pip logs are kept."""
    return home() / "logs"


def check_name(framework: str) -> str:
    """The name unchanged if it can name a folder safely; EnvError otherwise."""
    if not _NAME.match(framework):
        raise EnvError(f"bad framework name {framework!r}: use lower-case letters, digits and _")
    return framework


def split_key(key: str) -> tuple[str, str | None]:
    """A registry key or a setup argument ('jax', 'jax==0.10.1') as (framework, release), each checked; EnvError
    (one line) otherwise."""
    try:
        name, release = split_release(key)
    except SpecError as exc:
        raise EnvError(str(exc)) from None
    return check_name(name), release


def env_dir(framework: str, release: str | None = None) -> Path:
    """The venv folder of a framework, or of one of its releases (envs/jax-0.10.1)."""
    name = check_name(framework)
    return home() / "envs" / (f"{name}-{split_key(f'{name}=={release}')[1]}" if release else name)


def venv_python(folder: Path) -> Path:
    """The interpreter of a venv (POSIX layout)."""
    return folder / "bin" / "python"


def _parse(text: str, path: Path) -> dict[str, EnvRecord]:
    try:
        raw = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise EnvError(
            f"environment registry {path} is not valid JSON ({exc.msg}, line {exc.lineno}); "
            f"delete it and run dlbench setup again"
        ) from None
    if not isinstance(raw, dict):
        raise EnvError(f"environment registry {path} must hold a JSON object")
    out: dict[str, EnvRecord] = {}
    for name, entry in raw.items():
        if name.startswith("_"):
            continue  # metadata such as _version
        if not isinstance(entry, dict) or not isinstance(entry.get("python"), str):
            raise EnvError(f"environment registry {path}: entry {name!r} has no python path")
        framework, _, release = name.partition("==")
        cases = entry.get("cases")
        out[name] = EnvRecord(
            framework=framework,
            release=release,
            python=entry["python"],
            version=str(entry.get("version", "")),
            created=str(entry.get("created", "")),
            source=str(entry.get("source", "")),
            cases=dict(cases) if isinstance(cases, dict) else {},
            python_version=str(entry.get("python_version", "")),
            build=str(entry.get("build", "")),
            existing=entry.get("existing") is True,
        )
    return out


def load() -> dict[str, EnvRecord]:
    """Every registered environment ({} when there is no registry yet)."""
    path = registry_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise EnvError(f"cannot read the environment registry {path}: {exc.strerror}") from None
    return _parse(text, path)


def get(framework: str, release: str | None = None) -> EnvRecord | None:
    """The registered environment of a framework (of one of its releases), or None."""
    return load().get(release_label(framework, release))


def releases(framework: str) -> list[EnvRecord]:
    """The environments set up for a framework's releases (not its default one), in registry order."""
    return [r for r in load().values() if r.framework == framework and r.release]


@contextlib.contextmanager
def _locked() -> Iterator[Path]:
    """Hold an exclusive lock on the registry for a read-modify-write."""
    path = registry_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = open(path.with_name(path.name + ".lock"), "a+")
    except OSError as exc:
        raise EnvError(f"cannot write the environment registry {path}: {exc.strerror}") from None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield path
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()


def _write(path: Path, records: dict[str, EnvRecord]) -> None:
    data: dict[str, object] = {"_version": REGISTRY_VERSION}
    data.update({name: rec.to_json() for name, rec in sorted(records.items())})
    try:
        fd, tmp = tempfile.mkstemp(prefix=".envs-", suffix=".json", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2)
            fh.write("\n")
        os.replace(tmp, path)
    except OSError as exc:
        raise EnvError(f"cannot write the environment registry {path}: {exc.strerror}") from None


def record(rec: EnvRecord) -> None:
    """Add or replace a framework's entry (or a release's), atomically."""
    split_key(rec.key)
    with _locked() as path:
        records = load()
        records[rec.key] = rec
        _write(path, records)


def forget(framework: str, release: str | None = None) -> bool:
    """Remove a framework's entry, or a release's (its venv stays); whether there was one."""
    with _locked() as path:
        records = load()
        if records.pop(release_label(framework, release), None) is None:
            return False
        _write(path, records)
        return True
