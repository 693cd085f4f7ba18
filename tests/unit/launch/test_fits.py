"""The memory gate (#41): a point whose estimate cannot fit is refused in one line naming the estimate and the
limit before anything starts (unless --force); `run --dry-run` shows the points, their estimates and refusals and
runs nothing; a sweep names and skips what cannot fit where it skips impossible points; a max search probes the
estimate's guesses first."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from dlbench.analysis.maxbatch import Probe, bisect
from dlbench.analysis.memory import estimate
from dlbench.cases import all_cases
from dlbench.launch import fits
from dlbench.launch.fits import Limit, fitting, limit_for, memory_problem
from dlbench.parallel import Layout
from dlbench.points import Axes, Shared
from dlbench.runapi.run import RunRequest, prepare_run
from dlbench.spec import PointSpec, SpecError, preset
from dlbench.suite import builtin_names
from dlbench.suite import load as load_suite
from dlbench.suite.expand import expand

CliResult = tuple[int, str, str]
GIB = 2**30


def test_mixtral_at_batch_1_is_refused_in_one_line_within_5_s(cli: Callable[..., CliResult], store_path: Path) -> None:
    start = time.monotonic()
    code, _, err = cli("run", "-f", "torch", "-m", "mixtral_8x7b", "-b", "1", "--store", str(store_path))
    took = time.monotonic() - start
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "mixtral_8x7b" in err and "needs an estimated" in err and "GiB per device" in err
    assert "available now" in err and "--force" in err  # the limit, and how to go past it
    assert took < 5, took
    assert not store_path.exists()  # nothing written


@pytest.mark.parametrize(
    "args",
    [
        ("-m", "llama3_1b", "-b", "64"),
        ("-m", "llama_tiny", "--param", "seq=100000000"),
        ("-m", "llama_tiny", "-b", "100000000"),
        ("-m", "llama_tiny", "--param", "hidden=1000000"),
        ("-m", "moe_tiny", "--param", "experts=100000000"),
    ],
    ids=["llama3_1b-b64", "seq", "batch", "hidden", "experts"],
)
def test_each_point_that_would_fill_the_machine_is_refused(
    cli: Callable[..., CliResult], store_path: Path, args: tuple[str, ...]
) -> None:
    code, _, err = cli("run", "-f", "torch", *args, "--store", str(store_path))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "needs an estimated" in err, err


@pytest.mark.parametrize("name", [n for n in builtin_names() if n.endswith("-cpu")])
def test_the_cpu_suites_points_fit_a_24_gib_host_with_16_gib_free(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """The gate refuses what cannot fit, never what the suites run here: only wide-deep-cpu's vocabularies meant to
    grow until memory ends (skip_impossible) are refused."""

    class Memory:
        available = 16 * GIB

    monkeypatch.setattr(fits.psutil, "virtual_memory", lambda: Memory())
    suite = load_suite(name)
    specs = [p.spec for p in expand(suite, "cpu", data_dir="/nonexistent")]
    refused = [s for s in specs if fits.fit_problem(s)]
    grown = [s for s in refused if s.model == "wide_deep" and dict(s.case_params).get("vocab", 0) > 25_600_000]
    assert refused == grown and (not grown or suite.skip_impossible)


def test_every_case_that_fits_here_passes_at_its_cpu_batch_with_16_gib_free(monkeypatch: pytest.MonkeyPatch) -> None:
    class Memory:
        available = 16 * GIB

    monkeypatch.setattr(fits.psutil, "virtual_memory", lambda: Memory())
    models = [c.name for c in all_cases() if c.param_count < 10**9]  # every case but the members too large here
    req = RunRequest(axes=Axes(models=tuple(models)), shared=Shared(device="cpu"))
    assert len(prepare_run(req).specs) == len(models)  # each at its CPU batch, none refused


def test_force_goes_past_the_gate(store_path: Path) -> None:
    req = RunRequest(axes=Axes(models=("mixtral_8x7b",), batches=(1,)), store_path=str(store_path))
    with pytest.raises(SpecError, match="needs an estimated"):
        prepare_run(req)
    prepared = prepare_run(dataclasses.replace(req, force=True))  # not run: only prepared
    assert prepared.specs[0].model == "mixtral_8x7b"


def test_the_emulated_budget_is_the_limit_where_one_is_set() -> None:
    spec = PointSpec(
        framework="torch", model="resnet50", batch_size=64, protocol=preset("quick"), memory_limit_bytes=GIB // 4
    )
    limit = limit_for(spec)
    assert limit is not None and limit.bytes == GIB // 4 and "--memory-limit" in limit.what
    assert "--memory-limit of 0.25 GiB" in (memory_problem(spec, estimate(spec), limit) or "")


def test_a_gpu_point_is_judged_against_its_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML mocked at its boundary: two 80 GiB GPUs."""

    class Gpus:
        devices = [{"name": "H100", "memory_bytes": str(80 * GIB)}, {"name": "H100", "memory_bytes": str(80 * GIB)}]

    monkeypatch.setattr("dlbench.machine.env.gpus", lambda: Gpus())
    sharded = PointSpec(
        framework="torch",
        model="llama3_8b",
        batch_size=1,
        protocol=preset("quick"),
        device="cuda",
        devices_per_node=8,
        layout=Layout(fsdp=True, recompute=True),
        precision="bf16",
    )
    whole = PointSpec(framework="torch", model="llama3_8b", batch_size=1, protocol=preset("quick"), device="cuda")
    limit = limit_for(sharded)
    assert limit == Limit(80 * GIB, 1, "the 80.0 GiB of this machine's smallest visible GPU")
    assert memory_problem(sharded, estimate(sharded), limit) is None
    assert "80.0 GiB of this machine's smallest visible GPU" in (memory_problem(whole, estimate(whole), limit) or "")
    assert limit_for(whole, remote=True) is None  # ranks on machines dlbench cannot see: shown, not judged


def test_cpu_ranks_on_one_node_share_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    class Memory:
        available = 16 * GIB

    monkeypatch.setattr(fits.psutil, "virtual_memory", lambda: Memory())
    one = PointSpec(framework="torch", model="bert_base", batch_size=8, protocol=preset("quick"))
    many = PointSpec(framework="torch", model="bert_base", batch_size=8, protocol=preset("quick"), devices_per_node=16)
    assert fits.fit_problem(one) is None
    problem = fits.fit_problem(many)
    assert problem is not None and "x 16 devices" in problem and "shared by its 16 devices" in problem


def test_run_dry_run_lists_estimates_and_refusals_and_writes_nothing(
    cli: Callable[..., CliResult], store_path: Path
) -> None:
    code, out, err = cli(
        "run", "--dry-run", "-m", "llama3_8b,llama_tiny", "--fsdp", "--scale", "1n8g", "--store", str(store_path)
    )
    assert code == 0, err
    assert "memory/device" in out and "limit here" in out and "nothing run" in out
    assert "1: estimated" in out and "sharded (fsdp over 8)" in out
    assert "1: refused:" in out  # 8 ranks on a 2-CPU host at least (and llama3_8b's memory)
    assert not store_path.exists()


def test_a_sweep_names_and_skips_what_cannot_fit_or_refuses_it_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    class Memory:
        available = 8 * GIB

    monkeypatch.setattr(fits.psutil, "virtual_memory", lambda: Memory())
    small = PointSpec(framework="torch", model="wide_deep", batch_size=512, protocol=preset("quick"))
    huge = PointSpec(
        framework="torch", model="wide_deep", batch_size=512, protocol=preset("quick"), case_params=(("vocab", 10**9),)
    )
    said: list[str] = []
    assert fitting([small, huge], lambda s: s, force=False, skip=True, say=said.append) == [small]
    assert len(said) == 1 and said[0].startswith("skipped, cannot fit: torch wide_deep bs512 1n1c fp32 vocab=")
    with pytest.raises(SpecError, match=r"1 of 2 point\(s\) cannot fit: .*--skip-impossible runs the others"):
        fitting([small, huge], lambda s: s, force=False, skip=False, say=said.append, what="s")
    assert fitting([small, huge], lambda s: s, force=True, skip=False, say=said.append) == [small, huge]


def _oracle(probed: list[int]) -> Callable[[int], Probe]:
    """A probe that trains up to 37 and runs out of memory above, noting each value probed."""

    def probe(value: int) -> Probe:
        probed.append(value)
        return Probe(value, value <= 37, "ok" if value <= 37 else "oom")

    return probe


def test_a_search_probes_the_estimates_guesses_first() -> None:
    guided: list[int] = []
    best, exact, _, _ = bisect(1, 1024, _oracle(guided), guesses=(36, 40))
    assert (best, exact) == (37, True)
    assert guided[:3] == [1, 36, 40]  # lo, then the estimate's two guesses, then bisection inside (36, 40)
    plain: list[int] = []
    assert bisect(1, 1024, _oracle(plain))[:2] == (37, True)
    assert len(guided) == 5 and len(plain) == 11


def test_the_search_guesses_bracket_the_budget() -> None:
    base = PointSpec(framework="torch", model="resnet50", batch_size=1, protocol=preset("quick"), input_size=64)
    budget = 2 * GIB
    fits_to, fails_from = fits.estimated_guesses(lambda b: dataclasses.replace(base, batch_size=b), 1, 4096, budget)
    at = estimate(dataclasses.replace(base, batch_size=fits_to))
    above = estimate(dataclasses.replace(base, batch_size=fits_to + 1))
    certain = estimate(dataclasses.replace(base, batch_size=fails_from))
    assert at is not None and above is not None and certain is not None
    assert at.total <= budget < above.total and certain.total > 1.5 * budget
    assert fits.estimated_guesses(lambda b: base, 1, 4096, None) == ()


def test_a_one_process_strategy_holds_every_replica_in_its_process() -> None:
    """TF's mirrored over 2 CPU devices is one process holding both replicas: the host, and an emulated budget per
    process, hold two estimates."""
    spec = PointSpec(
        framework="tf",
        model="resnet50",
        batch_size=8,
        protocol=preset("quick"),
        devices_per_node=2,
        strategy="mirrored",
    )
    assert spec.processes == 1
    host = limit_for(spec)
    assert host is not None and host.ranks == 2
    budget = limit_for(dataclasses.replace(spec, memory_limit_bytes=GIB))
    assert budget is not None and budget.ranks == 2
    ddp = limit_for(dataclasses.replace(spec, framework="torch", strategy="ddp", memory_limit_bytes=GIB))
    assert ddp is not None and ddp.ranks == 1  # a process per device: the budget is each one's
