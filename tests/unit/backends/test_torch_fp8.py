"""`--precision fp8` (#35): refused off a GPU in one line naming the missing FP8 tensor cores (not as an unknown
precision), refused on a GPU below sm_89, FP8 dense peaks in the GPU table; and torchao's float8 training in its
emulation mode on this CPU: the conversion (which layers, which scaling) and a tiny Llama's loss within a stated
tolerance of bf16's.

Tolerance: 3 AdamW steps of llama_tiny (seq 32, batch 4) from the same weights; each step's fp8 loss within 2e-2
absolute of the bf16 loss (about 0.3% of the loss ~6.9). Casting activations, weights and gradients to e4m3/e5m2
(3 and 2 mantissa bits) moves the loss by a few 1e-3 here; a wrong scale (a missing or inverted amax scaling)
overflows e4m3's range of 448 or flushes values to zero, and moves it by far more. Measured here (torchao 0.18.0,
torch 2.13.0): tensorwise 1.5e-3 to 1.9e-3, rowwise 0.5e-3 to 2.6e-3 over the 3 steps.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from dlbench.cases import get_case
from dlbench.machine.peaks import gpu_peak
from dlbench.numerics import resolve_precision
from dlbench.refusals import refusal
from dlbench.spec import PointSpec, Protocol

ABS = 2e-2


def test_fp8_is_refused_off_a_gpu_naming_the_tensor_cores() -> None:
    n = resolve_precision("fp8", "cpu")
    assert n.refusal is not None and "FP8 tensor cores" in n.refusal and "sm_89" in n.refusal
    assert "\n" not in n.refusal and resolve_precision("fp8", "cuda").refusal is None
    assert resolve_precision("fp8", "cuda").compute_dtype == "bfloat16"
    jax = PointSpec(
        framework="jax",
        model="llama_tiny",
        batch_size=1,
        protocol=Protocol(0, 1, 1, "median"),
        precision="fp8",
        device="cuda",
    )
    reason = refusal(jax)  # the one place that refuses before anything runs (dlbench.refusals)
    assert reason is not None and "wired for torch only" in reason


def test_the_cli_refuses_fp8_here_in_one_line(cli: Callable[..., tuple[int, str, str]], tmp_path: object) -> None:
    code, _, err = cli(
        "run", "-f", "torch", "-m", "llama_tiny", "-p", "fp8", "--device", "cpu", "--store", f"{tmp_path}/r.db"
    )
    assert code == 2 and "FP8 tensor cores" in err and "unknown" not in err and len(err.strip().splitlines()) == 1


def test_the_peak_table_has_dense_fp8_rows() -> None:
    h100, bf16 = gpu_peak("NVIDIA H100 80GB HBM3", "fp8").peak, gpu_peak("NVIDIA H100 80GB HBM3", "bf16").peak
    assert h100 is not None and bf16 is not None and h100.tflops == pytest.approx(2 * bf16.tflops) == 1979.0
    assert gpu_peak("NVIDIA L40S", "fp8").peak.tflops == pytest.approx(733.0)  # type: ignore[union-attr]
    assert "no fp8 figure" in gpu_peak("NVIDIA A100-SXM4-80GB", "fp8").reason  # Ampere: no FP8 tensor cores


torch = pytest.importorskip("torch", reason="torch is not installed in this environment")

from dlbench.backends.torch import fp8  # noqa: E402


def test_a_gpu_below_sm89_is_refused() -> None:
    if fp8.refusal(None) is not None:
        pytest.skip(f"torchao absent: {fp8.refusal(None)}")
    assert "sm_80" in (fp8.refusal((8, 0)) or "") and fp8.refusal((9, 0)) is None and fp8.refusal((8, 9)) is None


def _losses(precision: str, recipe: str = "tensorwise") -> tuple[list[float], dict[str, object]]:
    from dlbench.backends.torch.data import synthetic_batch
    from dlbench.backends.torch.models import build_model
    from dlbench.backends.torch.step import TorchTrainer

    case = get_case("llama_tiny").configured({"seq": 32})
    torch.manual_seed(0)
    model = build_model(case)
    facts = fp8.convert(model, recipe, emulate=True) if precision == "fp8" else {}
    numerics = resolve_precision(precision, "cuda")  # the GPU's numerics (bf16 autocast), run on the CPU
    trainer = TorchTrainer(
        case, model, iter(()), torch.device("cpu"), dataclasses.replace(numerics, refusal=None), False, 4
    )
    batch = synthetic_batch(case, 4, torch.device("cpu"), seed=1)
    out = []
    for _ in range(3):
        trainer.train_step(batch)
        out.append(trainer.loss())
    return out, facts


@pytest.mark.parametrize("recipe", fp8.RECIPES)
def test_emulated_fp8_converts_scales_and_stays_near_bf16(recipe: str) -> None:
    pytest.importorskip("torchao", reason="torchao (dlbench[fp8]) is not installed here")
    bf16, _ = _losses("bf16")
    emulated, facts = _losses("fp8", recipe)
    assert facts["scaling"] == recipe and facts["emulated"] is True
    assert facts["float8_linears"] == 4 * 7  # q, k, v, o, gate, up, down in each of 4 layers; the head kept bf16
    assert emulated == pytest.approx(bf16, abs=ABS)
    assert emulated != bf16  # the casts changed something: it is not bf16 under another name
    assert emulated[-1] < emulated[0]  # it trains
