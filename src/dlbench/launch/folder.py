"""The folder a point's processes share: the spec file, the result files of its ranks, and a free port."""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil

from dlbench.spec import PointSpec

FOLDER_VAR = "DLBENCH_JOB_DIR"


@dataclass(frozen=True)
class PointFolder:
    """A point's folder, its spec file (written) and the result path its ranks write next to."""

    path: Path
    spec: Path
    result: Path


OWNER_FILE = "owner.json"
KEEP_AFTER_TIMEOUT_S = 600.0  # a shared folder may still serve a batch job for its time limit after the owner died


def _prefix() -> str:
    return f"dlbench-{socket.gethostname()}-"


def remove_orphans(base: Path) -> list[Path]:
    """Remove point folders under base left by a controller of this host that died without cleaning up (kill -9).

    A folder is an orphan when its owner process is gone and, for a shared folder (a Slurm job may still run in
    it), its point's timeout has passed too. Folders of other hosts are never judged. Returns what was removed.
    """
    removed = []
    for folder in base.glob(f"{_prefix()}*"):
        try:
            owner = json.loads((folder / OWNER_FILE).read_text())
            pid, keep_until = int(owner["pid"]), float(owner["keep_until"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not ours to judge (being created, or not a dlbench folder)
        if psutil.pid_exists(pid) or time.time() < keep_until:
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


@contextmanager
def point_folder(spec: PointSpec, shared: bool) -> Iterator[PointFolder]:
    """A fresh folder holding the spec, removed afterwards; orphans of killed controllers are removed first.

    It lies under $DLBENCH_JOB_DIR where set. Otherwise ranks on other machines (shared=True) need a folder
    they see too: ./dlbench-results/jobs, on clusters usually a shared file system; else the system temp folder.
    """
    if os.environ.get(FOLDER_VAR) or shared:
        root = Path(os.environ.get(FOLDER_VAR) or Path.cwd() / "dlbench-results" / "jobs").resolve()
        root.mkdir(parents=True, exist_ok=True)
    else:
        root = Path(tempfile.gettempdir())
    remove_orphans(root)
    with tempfile.TemporaryDirectory(prefix=_prefix(), dir=root) as tmp:
        keep_until = time.time() + (spec.timeout_s + KEEP_AFTER_TIMEOUT_S if shared else 0.0)
        (Path(tmp) / OWNER_FILE).write_text(json.dumps({"pid": os.getpid(), "keep_until": keep_until}))
        files = PointFolder(Path(tmp), Path(tmp) / "spec.json", Path(tmp) / "result.json")
        files.spec.write_text(spec.to_json())
        yield files


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on this machine right now (for a rendezvous hosted here); bound on `host` only."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
