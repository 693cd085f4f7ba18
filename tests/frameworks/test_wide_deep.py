"""wide_deep in each framework's own environment: the parameter count follows the vocabulary exactly, and a tiny
point (vocab 1000, batch 64, sparse and dense tables) trains through the CLI, its facts naming the embedding
machinery. Without a
framework's environment its tests skip, naming it (`dlbench setup <fw>`)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from dlbench.store.store import Store
from tests.support.frameworks import interpreter_or_skip

pytestmark = [pytest.mark.slow]
FRAMEWORKS = ["torch", "jax", "tf", "paddle"]
CliResult = tuple[int, str, str]
COUNT = """
import json, sys
from dlbench.backends import load_backend
from dlbench.cases import get_case
b = load_backend(sys.argv[1])
print(json.dumps({v: b.count_params(get_case("wide_deep").configured({"vocab": v})) for v in (1000, 54321)}))
"""


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_parameter_count_follows_vocab(fw: str) -> None:
    python = interpreter_or_skip(fw)
    proc = subprocess.run([python, "-c", COUNT, fw], capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    counts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert counts == {"1000": 33 * 1000 + 7_164_929, "54321": 33 * 54321 + 7_164_929}


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_tiny_point_trains_and_says_how(fw: str, cli: Callable[..., CliResult], store_path: Path) -> None:
    interpreter_or_skip(fw)
    code, _, err = cli(
        "run",
        "-f",
        fw,
        "-m",
        "wide_deep",
        "-b",
        "64",
        "--param",
        "vocab=1K",
        "--param",
        "sparse=0,1",
        "--device",
        "cpu",
        "--warmup",
        "1",
        "--steps",
        "2",
        "--repeats",
        "1",
        "--threads",
        "1",
        "--store",
        str(store_path),
    )
    assert code == 0, err
    points = {p.result.spec.params["sparse"]: p.result for p in Store(store_path).points()}
    assert sorted(points) == [0, 1] and all(r.status == "ok" for r in points.values())
    assert all(r.spec.params["vocab"] == 1000 and r.extra.get("embedding") for r in points.values())  # its facts
