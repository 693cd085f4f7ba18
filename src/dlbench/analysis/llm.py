"""The figures a decoder-pretraining point is compared by (#35): tokens/s and per device, model (and hardware)
TFLOP/s per device by the case's named FLOP convention, MFU against the dense peak of the math mode that ran and
against the BF16 dense peak beside it, and memory per device. Framework-free; read from a stored point.

- Tokens/s = the point's throughput (global sequences / wall time of the timed steps) x tokens per sequence;
  per device = / the devices the point trained on.
- MFU (of the math mode that ran) is `results.mfu.efficiency`'s: the peak stored with the point. The BF16 MFU
  divides the same achieved FLOP/s by the BF16 dense peak of the same device (the denominator most published
  figures use, FP8 runs' included). Where a peak is unknown, no MFU: never another device's.
- A LoRA point (#47) counts its FLOPs by cases/lora.py's convention (frozen weights get no weight gradient: 4N +
  6 N_adapters), and gives beside it the MFU by the full-model count (6N, as if every weight trained), with its
  trainable and frozen parameter counts.
- A MoE (#36) counts its FLOPs by active parameters (the router and the experts each token visits, cases/moe.py's
  convention, named as every decoder's) and adds its total and active parameter counts.
- Memory per device: the largest peak of any rank (the worker's measure: resident set on a CPU, the device's
  memory on a GPU, named by `memory_kind`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from dlbench.analysis.mfu import cores_per_device, efficiency
from dlbench.cases import UnknownCase, get_case
from dlbench.cases.arch import GptConfig, LlamaConfig, MoeConfig
from dlbench.cases.gpt import hardware_ratio, tokens_per_sample
from dlbench.machine.peaks import peak_for
from dlbench.records import PointResult
from dlbench.spec import SpecError

MEGATRON = "Megatron-LM (Narayanan et al. 2021): causal attention counted as the full square"


@dataclass(frozen=True)
class LlmFigures:
    """One decoder point's figures; None where the point or the peak leaves one open."""

    tokens_per_s: float
    tokens_per_s_per_device: float
    model_tflops_per_device: float
    hardware_tflops_per_device: float
    flop_convention: str
    math_mode: str
    mfu: float | None
    mfu_bf16: float | None
    bf16_peak_tflops_per_device: float | None
    peak_note: str
    memory_per_device_bytes: int | None
    memory_kind: str
    params_total: int | None = None  # a MoE's every parameter, and those one token's forward uses (cases/moe.py)
    params_active: int | None = None
    params_trainable: int | None = None  # a LoRA point's adapters, and the base it freezes (cases/lora.py)
    params_frozen: int | None = None
    mfu_full_model: float | None = None  # a LoRA point's MFU by the full-model count (6N), beside its own

    def as_dict(self) -> dict[str, object]:
        """Plain JSON-able figures (the point's JSON under "llm")."""
        return asdict(self)


def flop_convention(model: str) -> str | None:
    """The FLOP formula a decoder case counts by (named in every point's JSON); None for any other case."""
    try:
        arch = get_case(model).arch
    except UnknownCase:
        return None
    if isinstance(arch, LlamaConfig):
        from dlbench.cases.llama import FLOP_CONVENTION

        return FLOP_CONVENTION
    if isinstance(arch, MoeConfig):  # by active parameters: the router and the experts each token visits (#36)
        from dlbench.cases.moe import FLOP_CONVENTION as MOE_CONVENTION

        return MOE_CONVENTION
    return MEGATRON if isinstance(arch, GptConfig) else None


def _lora(r: PointResult, mfu: float | None) -> tuple[str | None, dict[str, object]]:
    """A LoRA point's FLOP convention and figures (trainable, frozen, MFU by the full-model count); (None, {})
    for a point that trains the whole model."""
    try:
        case = get_case(r.spec.model).configured(r.spec.params)
    except (UnknownCase, SpecError):
        return None, {}
    from dlbench.cases import lora
    from dlbench.cases.llama import flops_per_sample, param_count

    adapters = lora.lora_of(case)
    if adapters is None or not isinstance(case.arch, LlamaConfig):
        return None, {}
    ratio = flops_per_sample(case, r.spec.input_size, full_model=True) / flops_per_sample(case, r.spec.input_size)
    full = mfu * ratio if mfu is not None and mfu * ratio <= 1.0 else None
    figures: dict[str, object] = {
        "params_trainable": case.param_count,
        "params_frozen": param_count(case.arch),
        "mfu_full_model": full,
    }
    return lora.FLOP_CONVENTION, figures


def llm_figures(r: PointResult) -> LlmFigures | None:
    """The decoder figures of a measured point; None for a case that is not a decoder, or a failed point."""
    convention = flop_convention(r.spec.model)
    tokens = tokens_per_sample(r.spec.model, r.spec.input_size, r.spec.params)
    m = r.metrics
    if convention is None or tokens is None or m is None or r.status != "ok":
        return None
    e = efficiency(r)
    if e.achieved_tflops is None:
        return None
    devices = r.spec.world_size
    model_tf = e.achieved_tflops / devices
    try:
        ratio = hardware_ratio(r.spec.model, r.spec.params, r.spec.input_size) if r.spec.layout.recompute else 1.0
    except SpecError:
        ratio = 1.0
    cores = cores_per_device(r.spec, int(r.env.identity.get("cpu_cores", "0") or 0))
    bf16 = peak_for(
        r.spec.device,
        r.env.identity.get("device_model", ""),
        "bf16",
        r.env.descriptive.get("hostname", ""),
        cores,
        r.env.identity.get("gpu_mig", ""),
    ).peak
    mfu_bf16 = model_tf / bf16.tflops if bf16 is not None and model_tf <= bf16.tflops else None
    lora_convention, lora_figures = _lora(r, e.mfu)
    return LlmFigures(
        tokens_per_s=m.throughput * tokens,
        tokens_per_s_per_device=m.throughput * tokens / devices,
        model_tflops_per_device=model_tf,
        hardware_tflops_per_device=model_tf * ratio,
        flop_convention=lora_convention or convention,
        math_mode=e.math_mode,
        mfu=e.mfu,
        mfu_bf16=mfu_bf16,
        bf16_peak_tflops_per_device=bf16.tflops if bf16 else None,
        peak_note=e.note,
        memory_per_device_bytes=m.peak_memory_bytes,
        memory_kind=m.memory_kind,
        **_moe_params(r),
        **lora_figures,  # type: ignore[arg-type]
    )


def _moe_params(r: PointResult) -> dict[str, int]:
    """A MoE point's total and active parameter counts at its parameters; nothing for a dense decoder."""
    try:
        case = get_case(r.spec.model).configured(r.spec.params)
    except (UnknownCase, SpecError):
        return {}
    if not isinstance(case.arch, MoeConfig):
        return {}
    from dlbench.cases.moe import active_param_count

    return {"params_total": case.param_count, "params_active": active_param_count(case.arch)}


__all__ = ["MEGATRON", "LlmFigures", "flop_convention", "llm_figures"]
