"""Which cases a framework installed in dlbench's own interpreter builds (`dlbench list`'s support table): asked
once, by building each model's shapes in a child process, and kept under the dlbench home. A framework in an
environment of its own keeps its answer in the registry (`dlbench setup`); one pip installed beside dlbench (torch)
has no setup, so without this cache its every case read `?`.

The answer is kept per interpreter, framework version and set of cases (names and reference counts), so a new
case, an upgrade or another interpreter asks again.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from dlbench.paths import cache_dir


def _file() -> Path:
    return cache_dir("cases") / "interpreters.json"


def fingerprint(python: str, framework: str, version: str, cases: Iterable[tuple[str, int]]) -> str:
    """What the answer depends on: the interpreter, the framework and its version, and the cases asked about."""
    text = json.dumps([python, framework, version, sorted(cases)])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def load(key: str) -> dict[str, object]:
    """The cached answer for this fingerprint ({} where none, or where the cache cannot be read)."""
    try:
        data = json.loads(_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    answer = data.get(key) if isinstance(data, dict) else None
    return dict(answer) if isinstance(answer, dict) else {}


def store(key: str, answer: dict[str, object]) -> None:
    """Keep an answer (written whole: a temporary file renamed over the cache); a cache that cannot be written is
    skipped, as the answer only saves asking again."""
    path = _file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = {}
        data = data if isinstance(data, dict) else {}
        data[key] = answer
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".interpreters-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.replace(tmp, path)
    except OSError:
        return


__all__ = ["fingerprint", "load", "store"]
