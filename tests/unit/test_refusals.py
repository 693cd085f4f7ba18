"""Every impossible request is refused before anything runs (#31): exit 2, one line, nothing stored, in seconds;
the capability tables are framework-free (each rule's own row: test_refusal_rules.py)."""

from __future__ import annotations

import dataclasses
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from dlbench.backends import all_backends
from dlbench.capabilities import Capabilities
from dlbench.parallel import Layout
from dlbench.refusals import Impossible, possible, refusal, refuse_impossible
from dlbench.spec import PointSpec, preset

CliResult = tuple[int, str, str]
IMPOSSIBLE: list[tuple[str, str]] = [
    ("-f torch -m alexnet --scale 1n2c --strategy dp", "nn.DataParallel"),
    ("-f torch -m alexnet --scale 1n2c --strategy replicated-nccl", "torch has no replicated-nccl strategy"),
    ("-f torch -m alexnet --scale 1n2c --strategy horovod", "Horovod"),
    ("-f torch -m alexnet --scale 1n2c --strategy mirrored", "torch has no mirrored strategy"),
    ("-f torch -m alexnet --scale 1n2c --strategy ps-cpu", "torch has no ps-cpu strategy"),
    ("-f torch -m gpt --param layers=2 --scale 1n4c --pipeline-parallel 4", "2 layer(s) do not split into 4"),
    ("-f torch -m gpt --param hidden=64 --scale 1n2c --tensor-parallel 2", "1 attention head(s) do not split"),
    ("-f torch -m resnet50 --scale 1n2c --tensor-parallel 2", "resnet50 has no parallel layout"),
    ("-f tf -m alexnet --scale 1n2c --strategy replicated-nccl", "replicated-nccl needs NCCL"),
    ("-f torch -m alexnet --strategy ddp", "needs several devices"),
    ("-f torch -m alexnet --precision tf32", "tf32 is a tensor-core mode"),
    ("-f jax -m gpt --scale 1n2c --pipeline-parallel 2", "JAX has no pipeline-parallel schedule"),
    ("-f jittor -m alexnet --scale 1n2c", "one device only"),
    ("-f mxnet -m llama_tiny", "MXNet backend does not build the Llama or MoE families: MXNet 1.9.1 is its last"),
    ("-f mxnet -m moe_tiny", "no RMSNorm, rotary embedding or causal scaled-dot-product attention"),
    ("-f mxnet -m alexnet --device cpu --precision bf16 --scale 1n2c --strategy ps-cpu", "fp32"),
    ("-f jax -m resnet50 --channels-last", "JAX/XLA chooses layouts"),
    ("-f torch -m bert_base --channels-last", "image models only"),
    ("-f torch -m gpt --scale 1n2c --tensor-parallel 2 --strategy allreduce", "leave --strategy at none"),
]


@pytest.mark.parametrize("line, message", IMPOSSIBLE, ids=[line for line, _ in IMPOSSIBLE])
def test_an_impossible_request_exits_2_at_once_storing_nothing(
    cli: Callable[..., CliResult], tmp_path: Path, line: str, message: str
) -> None:
    store = tmp_path / "results.db"
    start = time.monotonic()
    code, out, err = (
        cli("run", *line.split(), "--device", "cpu", "--store", str(store))
        if "--device" not in line
        else cli("run", *line.split(), "--store", str(store))
    )
    elapsed = time.monotonic() - start
    assert code == 2, (out, err)
    assert message in err and len(err.strip().splitlines()) == 1 and out == "", err
    assert not store.exists() and list(tmp_path.iterdir()) == []  # nothing created, nothing run
    assert elapsed < 5.0, f"{elapsed:.1f} s (load {os.getloadavg()[0]:.1f})"


def test_the_worker_refuses_through_the_same_table() -> None:
    """A point reaching the worker another way gets the same line (worker.run asks dlbench.refusals first)."""
    from dlbench.wire import RankContext
    from dlbench.worker import run

    spec = PointSpec("fake", "resnet50", 2, preset("quick"), devices_per_node=2, layout=Layout(tensor_parallel=2))
    result = run(spec, RankContext(rank=0, world_size=2, local_rank=0, local_world_size=2))
    assert result.status == "unsupported" and "resnet50 has no parallel layout" in (result.error or "")


def _dump(store: Path) -> str:
    con = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        return "\n".join(con.iterdump())
    finally:
        con.close()


def test_a_refused_store_keeps_its_rows(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    store = tmp_path / "results.db"
    assert (
        cli(
            "run",
            "-f",
            "fake",
            "-m",
            "resnet50",
            "--steps",
            "1",
            "--warmup",
            "0",
            "--repeats",
            "1",
            "--store",
            str(store),
        )[0]
        == 0
    )
    before = _dump(store), sorted(tmp_path.iterdir())
    code, _, err = cli(
        "run",
        "-f",
        "torch",
        "-m",
        "alexnet",
        "--device",
        "cpu",
        "--scale",
        "1n2c",
        "--strategy",
        "dp",
        "--store",
        str(store),
    )
    assert code == 2 and (_dump(store), sorted(tmp_path.iterdir())) == before, err


def test_every_backend_has_a_framework_free_table() -> None:
    for name, info in all_backends(include_test=True).items():
        table = info.capabilities_table()
        assert isinstance(table, Capabilities) and table.framework == name
    code = (
        "import os, sys; before = dict(os.environ); from dlbench.backends import all_backends; "
        "[b.capabilities_table() for b in all_backends(True).values()]; "
        "import dlbench.refusals; "
        "heavy = [m for m in ('torch', 'tensorflow', 'jax', 'paddle', 'mxnet', 'oneflow', 'megengine', "
        "'mindspore', 'jittor') if m in sys.modules]; "
        "assert not heavy, heavy; assert dict(os.environ) == before, 'a table set an environment variable'"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_run_names_each_impossible_point_of_several() -> None:
    ok = PointSpec("torch", "alexnet", 2, preset("quick"), devices_per_node=2)
    bad = [dataclasses.replace(ok, strategy=s) for s in ("dp", "mirrored")]
    refuse_impossible([ok])
    with pytest.raises(Impossible, match=r"2 of 3 point\(s\) cannot run: torch alexnet bs2 1n2c fp32 dp: .*mirrored"):
        refuse_impossible([ok, *bad])


def test_sweep_refuses_a_suite_up_front_or_skips_and_names(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    suite = tmp_path / "s.yaml"
    suite.write_text(
        "name: s\ndevice: cpu\naxes: {framework: torch, model: alexnet, scale: 1n2c, strategy: [ddp, dp, mirrored]}\n"
    )
    store = tmp_path / "results.db"
    for extra in ((), ("--dry-run",)):
        code, out, err = cli("sweep", str(suite), *extra, "--store", str(store))
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
        assert "2 of 3 point(s) cannot run" in err and "dp:" in err and "mirrored" in err and "--skip-impossible" in err
        assert not store.exists()
    code, out, err = cli("sweep", str(suite), "--dry-run", "--skip-impossible", "--store", str(store))
    assert code == 0, err
    assert "1 points" in out and "skipped, impossible: torch alexnet bs" in err and "1n2c fp32 dp" in err
    assert "mirrored" in err


def test_possible_keeps_order_and_items() -> None:
    ok = PointSpec("torch", "alexnet", 2, preset("quick"), devices_per_node=2)
    items = [("a", ok), ("b", dataclasses.replace(ok, strategy="dp")), ("c", ok)]
    said: list[str] = []
    assert possible(items, lambda i: i[1], True, said.append) == [items[0], items[2]]
    assert len(said) == 1 and "dp" in said[0]


def test_a_builtin_suite_with_impossible_cells_says_it_skips_them(monkeypatch: pytest.MonkeyPatch) -> None:
    from dlbench.suite import builtin_names, load
    from dlbench.suite.expand import expand

    # 'installed' as on a machine holding every framework: the answer must not depend on this machine's set-up
    # (CI has jax, tf and paddle, whose multi-device real-data cells are impossible; a bare checkout has torch).
    monkeypatch.setattr("dlbench.suite.expand.installed", lambda _backend: True)

    for name in builtin_names():
        suite = load(name)
        bad = [
            p
            for p in expand(suite, suite.device if suite.device != "auto" else "cpu", "/nonexistent", {})
            if refusal(p.spec)
        ]
        assert not bad or suite.skip_impossible, f"built-in suite {name} holds impossible points: {len(bad)}"
