"""The folder a point's processes share: the spec file, the result files of its ranks, and a free port."""

from __future__ import annotations

import os
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from dlbench.spec import PointSpec

FOLDER_VAR = "DLBENCH_JOB_DIR"


@dataclass(frozen=True)
class PointFolder:
    """A point's folder, its spec file (written) and the result path its ranks write next to."""

    path: Path
    spec: Path
    result: Path


@contextmanager
def point_folder(spec: PointSpec, shared: bool) -> Iterator[PointFolder]:
    """A fresh folder holding the spec, removed afterwards.

    It lies under $DLBENCH_JOB_DIR where set. Otherwise ranks on other machines (shared=True) need a folder
    they see too: ./dlbench-results/jobs, on clusters usually a shared file system; else the system temp folder.
    """
    base: str | None = None
    if os.environ.get(FOLDER_VAR) or shared:
        root = Path(os.environ.get(FOLDER_VAR) or Path.cwd() / "dlbench-results" / "jobs").resolve()
        root.mkdir(parents=True, exist_ok=True)
        base = str(root)
    with tempfile.TemporaryDirectory(prefix="dlbench-", dir=base) as tmp:
        files = PointFolder(Path(tmp), Path(tmp) / "spec.json", Path(tmp) / "result.json")
        files.spec.write_text(spec.to_json())
        yield files


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on this machine right now (for a rendezvous hosted here); bound on `host` only."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
