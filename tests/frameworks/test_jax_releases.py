"""Two real JAX releases side by side (#49): `-f jax==0.10.1,jax==0.10.2` runs each point in its release's own
environment (the worker reports the version it imported) and `compare --by version` compares them. Needs both
environments (`dlbench setup jax==0.10.1 jax==0.10.2`); skipped, naming the missing one, where absent (CI).
One repeat of two DLRM-tiny steps per release: the time is JAX's import and compilation (about a minute a release
at load 7 on 2 cores; the test skips in CI, which sets up no release environment)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from dlbench.analysis.compare import CONTENDED, UNDETECTABLE
from dlbench.envs.interpreters import NotInstalled, interpreter_for
from dlbench.store.store import Store

pytestmark = [pytest.mark.slow]
CliResult = tuple[int, str, str]
RELEASES = ("0.10.1", "0.10.2")


def _releases_or_skip() -> None:
    for release in RELEASES:
        try:
            interpreter_for("jax", release)
        except NotInstalled as exc:
            pytest.skip(f"jax=={release} environment absent ({exc}); `dlbench setup jax==0.10.1 jax==0.10.2` makes it")


def test_two_jax_releases_give_a_row_each_and_a_comparison(cli: Callable[..., CliResult], store_path: Path) -> None:
    _releases_or_skip()
    frameworks = ",".join(f"jax=={r}" for r in RELEASES)
    point = ("-m", "dlrm_tiny", "-b", "2", "--steps", "2", "--warmup", "1", "--repeats", "1")  # a small case
    code, out, err = cli("run", "-f", frameworks, *point, "--store", str(store_path))
    assert code == 0, err[-2000:]
    assert all(f"jax=={r}" in out for r in RELEASES)  # a row per release
    points = Store(store_path, readonly=True).points()
    assert [p.result.status for p in points] == ["ok", "ok"]
    assert [p.result.env.identity["framework_version"] for p in points] == list(RELEASES)  # each ran its own
    code, out, err = cli("compare", "--by", "version", "--store", str(store_path), "--format", "json")
    (step,) = json.loads(out)["points"]
    assert step["label"].endswith("0.10.1 -> 0.10.2")
    # two step times a side cannot show a 2% change (Mann-Whitney's smallest p is 0.33): no verdict is honest
    assert (step["verdict"], code) in ((UNDETECTABLE, 3), (CONTENDED, 6)), (step, err)
