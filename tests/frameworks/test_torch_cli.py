"""The CLI end to end on real PyTorch models at a small input size."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from dlbench.store.store import Store
from tests.support.frameworks import refused_up_front

pytest.importorskip("torch", reason="torch is not installed in this environment: pip install -e '.[torch]'")

CliResult = tuple[int, str, str]
SMALL = ("--input-size", "64", "-b", "2", "--warmup", "1", "--steps", "2", "--repeats", "2")


def test_resnet50_and_bert_end_to_end(cli: Callable[..., CliResult], store_path: Path) -> None:
    code, out, err = cli("run", "-f", "torch", "-m", "resnet50,bert_base", *SMALL, "--store", str(store_path))
    assert code == 0, err
    assert "resnet50" in out and "bert_base" in out and "n=2" in out and "±" not in out  # 2 repeats: no interval
    [p50, pbert] = [p.result for p in Store(store_path).points()]
    for r in (p50, pbert):
        assert r.status == "ok" and r.metrics is not None
        assert r.metrics.throughput > 0 and r.metrics.ci_low is None and r.metrics.cv is None
        assert r.metrics.final_loss is not None and r.metrics.final_loss == r.metrics.final_loss
        assert r.metrics.peak_memory_bytes and r.metrics.memory_kind == "rss"
        assert [rep.steps for rep in r.ranks[0].repeats] == [2, 2]  # two windows of one step each
        assert r.env.identity["framework_version"].startswith("2.")
        assert r.env.identity["device"] == "cpu" and r.env.identity["math_mode"] == "fp32"
    code, out, _ = cli("results", "--format", "json", "--store", str(store_path))
    assert json.loads(out)[0]["ranks"][0]["repeats"][0]["window_steps"] == [1, 1]


def test_bf16_and_channels_last_on_cpu_and_amp_is_refused(cli: Callable[..., CliResult], store_path: Path) -> None:
    # amp means float16 with loss scaling in every backend: a GPU mode; the CPU's reduced precision is bf16. The
    # spec alone shows it, so it is refused before anything runs (#31), bf16 with it
    refused_up_front(
        cli,
        store_path,
        ("-f", "torch", "-m", "alexnet", "-p", "bf16,amp", "--channels-last", *SMALL),
        "--precision bf16",
    )
    code, _, err = cli(
        "run", "-f", "torch", "-m", "alexnet", "-p", "bf16", "--channels-last", *SMALL, "--store", str(store_path)
    )
    assert code == 0, err
    [bf16] = [p.result for p in Store(store_path).points()]
    assert bf16.status == "ok" and bf16.spec.channels_last and bf16.env.identity["math_mode"] == "bf16"


def test_channels_last_is_refused_for_bert(cli: Callable[..., CliResult], store_path: Path) -> None:
    refused_up_front(
        cli, store_path, ("-f", "torch", "-m", "bert_base", "--channels-last", *SMALL), "image models only"
    )


def test_cuda_is_refused_without_a_gpu(cli: Callable[..., CliResult], store_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the refusal only applies without one")
    code, _, err = cli("run", "-f", "torch", "-m", "alexnet", "--device", "cuda", *SMALL, "--store", str(store_path))
    # issue 24: bad input (exit 2, one line, nothing stored), so that a CI job that lost its GPU fails
    assert code == 2 and "--device cpu" in err and not store_path.exists()


@pytest.mark.slow
def test_compile(cli: Callable[..., CliResult], store_path: Path) -> None:
    code, _, err = cli("run", "-f", "torch", "-m", "alexnet", "--compile", *SMALL, "--store", str(store_path))
    assert code == 0, err
    [p] = Store(store_path).points()
    assert p.result.status == "ok" and p.result.spec.compile
