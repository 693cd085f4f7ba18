"""The cluster tests share this host's emulated nodes (network namespaces, slurmd n1 and n2, Open MPI): under
`pytest -n 2` a file takes a lock for its whole run, so that two of them never start ranks on those nodes at once."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module", autouse=True)
def _one_cluster_file_at_a_time(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """An exclusive lock beside the workers' temporary folders (pytest-N/, which xdist's workers share)."""
    lock = tmp_path_factory.getbasetemp().parent / "dlbench-cluster-tests.lock"
    with open(lock, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
