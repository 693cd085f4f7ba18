"""The one place that refuses, before anything runs, every point the spec alone shows to be impossible.

It reads each framework's capability table (dlbench.capabilities, through the light backend registry) and never
imports a framework: strategies a framework or device cannot run, layouts that do not divide (layers over
pipeline stages, heads over tensor ranks), layout options on cases without a layout, precisions a device lacks,
options a framework does not offer. The run API's gate calls it before the store opens; the worker calls it again
first, so that a point reaching it another way gets the same one line. The backends' own `refuse` holds only
what needs the framework at hand (its version, a device it sees, a GPU build's kernels, a CPU's bf16 units).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from dlbench.analysis.targets import convergence_refusal
from dlbench.backends import get_info
from dlbench.capabilities import Capabilities
from dlbench.cases import ImageInput, get_case
from dlbench.cases.arch import DitConfig, FaceArch, GptConfig, LlamaConfig, WideDeepArch
from dlbench.cases.dit_layout import dit_layout_refusal
from dlbench.cases.dlrm import dlrm_refusal
from dlbench.cases.llama_layout import llama_layout_refusal
from dlbench.cases.lora import lora_refusal
from dlbench.cases.moe_layout import moe_refusal
from dlbench.cases.wide_deep import sparse_embeddings
from dlbench.numerics import resolve_precision
from dlbench.spec import PointSpec, SpecError

T = TypeVar("T")
SHOWN = 5  # impossible points a one-line refusal names before "and N more"


class Impossible(SpecError):
    """A point the spec alone shows cannot run (exit 2, nothing run, nothing stored)."""


def refusal(spec: PointSpec) -> str | None:
    """Why this point cannot run, decided from the spec and its framework's capability table (one line), or None."""
    converge = convergence_refusal(spec)  # --converge with no target, or one that cannot be reached (#34)
    if converge:
        return converge
    # a third-party backend without a table: no split model; its worker decides the rest
    caps = get_info(spec.framework).capabilities_table() or Capabilities.unknown(spec.framework)
    return (
        caps.arch_refusal(get_case(spec.model).arch)
        or _devices(spec, caps)
        or dit_layout_refusal(spec)
        or llama_layout_refusal(spec)
        or moe_refusal(spec)
        or lora_refusal(spec, caps)  # MLPerf's LoRA and DLRM (#47)
        or dlrm_refusal(spec, caps)
        or _layout(spec, caps)
        or _strategy(spec, caps)
        or _classifier(spec, caps)
        or _precision(spec, caps)
        or _options(spec, caps)
    )


def label(spec: PointSpec) -> str:
    """'torch alexnet bs2 1n2c fp32 dp': the parts of a point that tell impossible ones apart."""
    parts = [spec.framework, spec.model, f"bs{spec.batch_size}", spec.scale, spec.precision]
    parts += ["compile"] if spec.compile else []
    parts += [",".join(f"{k}={v}" for k, v in spec.case_params)] if spec.case_params else []
    parts += [spec.strategy] if spec.strategy != "none" else []
    parts += [spec.layout.label] if spec.layout.splits_model or spec.layout.recompute else []
    return " ".join(parts)


def impossible(items: Iterable[T], spec_of: Callable[[T], PointSpec]) -> list[tuple[T, str]]:
    """The items whose point cannot run, each with its reason."""
    found = []
    for item in items:
        reason = refusal(spec_of(item))
        if reason:
            found.append((item, reason))
    return found


def refuse_impossible(specs: Sequence[PointSpec]) -> None:
    """`run`: an `Impossible` error naming the points that cannot run (the reason alone for one point)."""
    bad = impossible(specs, lambda s: s)
    if len(bad) == 1 and len(specs) == 1:
        raise Impossible(bad[0][1])
    if bad:
        raise Impossible(_named(bad, lambda s: s, len(specs)))


def possible(
    items: Sequence[T],
    spec_of: Callable[[T], PointSpec],
    skip: bool,
    say: Callable[[str], None],
    what: str = "the points",
) -> list[T]:
    """`sweep`: the items whose point can run. Without `skip`, any impossible one refuses the whole list up
    front (`Impossible`, one line naming them); with it, each is named through `say` and left out."""
    bad = impossible(items, spec_of)
    if not bad:
        return list(items)
    if not skip:
        raise Impossible(f"{what}: {_named(bad, spec_of, len(items))}; --skip-impossible runs the others")
    for item, reason in bad:
        say(f"skipped, impossible: {label(spec_of(item))}: {reason}")
    dropped = {id(item) for item, _ in bad}
    return [item for item in items if id(item) not in dropped]


def _named(bad: list[tuple[T, str]], spec_of: Callable[[T], PointSpec], total: int) -> str:
    shown = "; ".join(f"{label(spec_of(item))}: {reason}" for item, reason in bad[:SHOWN])
    more = f"; and {len(bad) - SHOWN} more" if len(bad) > SHOWN else ""
    return f"{len(bad)} of {total} point(s) cannot run: {shown}{more}"


def _devices(spec: PointSpec, caps: Capabilities) -> str | None:
    if spec.world_size == 1:
        return None
    if spec.device not in caps.multi_device:
        return caps.multi_device_why or (
            f"dlbench's {spec.framework} backend runs several devices on "
            f"{'/'.join(caps.multi_device) or 'no device'} only: use --scale 1n1c"
        )
    if spec.data == "real" and not caps.real_data_multi:
        return f"real data is not split over {spec.framework}'s replicas yet: use --data synthetic with several devices"
    return None


def _strategy(spec: PointSpec, caps: Capabilities) -> str | None:
    if caps.any_strategy:
        return None
    if spec.world_size == 1:
        if spec.strategy != "none":
            return f"strategy {spec.strategy} needs several devices: use --scale 1n2c or more, or --strategy none"
        return None
    if (spec.layout.splits_model or spec.layout.fsdp) and caps.split_needs_strategy_none:
        return None  # a split or sharded model's replicas are kept in step by the layout itself (FSDP2)
    name = spec.strategy if spec.strategy != "none" else caps.default_strategy
    refused = dict(caps.refused_strategies)
    if name in refused:
        return refused[name]
    if not name:
        return f"{spec.framework} needs a strategy named on several devices: {caps.strategy_advice}"
    cap = caps.strategy(name)
    if cap is None:
        return f"{spec.framework} has no {name} strategy; {caps.strategy_advice}"
    reason = cap.refusal(spec.device, spec.nodes, spec.precision)
    if reason is None and cap.sparse_why and isinstance(get_case(spec.model).arch, WideDeepArch):
        if sparse_embeddings(get_case(spec.model).configured(spec.params)):
            return cap.sparse_why
    return reason


def _precision(spec: PointSpec, caps: Capabilities) -> str | None:
    reason = resolve_precision(spec.precision, spec.device).refusal if caps.numerics_policy else None
    if reason:
        return reason
    offered = caps.precisions_on(spec.device)
    if spec.precision == "fp8" and "fp8" not in offered:
        return (
            f"--precision fp8 is wired for torch only (torchao's float8 training), not {spec.framework}: "
            "use --precision bf16"
        )
    if spec.precision not in offered:
        return caps.precision_why or (
            f"dlbench's {spec.framework} backend runs {', '.join(offered)} on "
            f"{spec.device}: use --precision {offered[0]}"
        )
    if spec.precision == "fp8" and (spec.layout.splits_model or spec.layout.fsdp) and not caps.fp8_layouts:
        return "fp8 with a split or FSDP layout is not wired (float8 DTensor styles): use one device"
    return None


def _classifier(spec: PointSpec, caps: Capabilities) -> str | None:
    """A model-parallel classifier (the face cases' model_parallel=1) on several devices: its shards are all-reduced
    only under the strategies the table names."""
    allowed = caps.sharded_classifier_strategies
    if spec.world_size == 1 or not allowed:
        return None
    arch = get_case(spec.model).configured(spec.params).arch
    if not (isinstance(arch, FaceArch) and arch.model_parallel):
        return None
    if (spec.strategy if spec.strategy != "none" else caps.default_strategy) in allowed:
        return None
    return f"a model-parallel classifier trains with the {' or '.join(allowed)} strategy only (its shards are not all-reduced)"


def _layout(spec: PointSpec, caps: Capabilities) -> str | None:
    lay = spec.layout
    if not (lay.splits_model or lay.recompute or lay.fsdp):
        return None
    case = get_case(spec.model).configured(spec.params)
    if isinstance(case.arch, DitConfig):  # FSDP and --recompute (#48): dit_layout_refusal refused the rest
        return _amp_over_shards(spec, caps) if lay.fsdp else None
    if isinstance(case.arch, LlamaConfig):  # the llama family's layouts (FSDP, TP+SP, PP): llama_layout_refusal
        return _amp_over_shards(spec, caps) if lay.splits_model or lay.fsdp else None
    if not (lay.splits_model or lay.recompute):
        return None  # --fsdp on another case: llama_layout_refusal said so
    if not isinstance(case.arch, GptConfig):
        return (
            f"{case.name} has no parallel layout: --tensor-parallel, --pipeline-parallel and --recompute apply "
            "to the GPT and llama cases only; drop them"
        )
    fw = spec.framework
    no_split = caps.layout_why or (
        f"dlbench's {fw} backend does not split a model (tensor or pipeline parallel is "
        "wired for torch, and tensor parallel for JAX): use --tensor-parallel 1 "
        "--pipeline-parallel 1"
    )
    if (lay.tensor_parallel > 1 and not caps.tensor_parallel) or (
        lay.pipeline_parallel > 1 and not caps.pipeline_parallel
    ):
        return no_split
    if lay.recompute and not caps.recompute:
        return f"dlbench's {fw} backend does not recompute activations: drop --recompute"
    if not lay.splits_model:
        return None
    if caps.split_needs_strategy_none and spec.strategy != "none":
        return (
            "a tensor- or pipeline-parallel point keeps its data-parallel replicas in step itself (FSDP2): leave "
            "--strategy at none"
        )
    if spec.compile and not caps.split_compile:
        return f"{fw}'s compiler is not wired for a split model: drop --compile"
    return _amp_over_shards(spec, caps) or _shape(
        case.arch, lay.tensor_parallel, lay.pipeline_parallel, caps.even_vocab_shards
    )


def _amp_over_shards(spec: PointSpec, caps: Capabilities) -> str | None:
    """fp16 loss scaling over a split or sharded model on GPUs, where the backend has not wired it."""
    if spec.precision == "amp" and spec.device == "cuda" and not caps.split_amp_on_gpu:
        return (
            "fp16 loss scaling across shards is not wired (every rank would need the others' overflow check): "
            "use --precision bf16"
        )
    return None


def _shape(a: GptConfig, tensor: int, pipeline: int, even_vocab: bool) -> str | None:
    """Why this GPT's shape does not split over the layout (one line), or None."""
    if a.num_heads % tensor:
        return (
            f"{a.num_heads} attention head(s) do not split over {tensor} tensor-parallel ranks: use a "
            f"--tensor-parallel that divides {a.num_heads}, or a wider model"
        )
    if (a.mlp_ratio * a.hidden_size) % tensor:
        return f"the MLP's {a.mlp_ratio * a.hidden_size} units do not split over {tensor} tensor-parallel ranks"
    if a.num_layers % pipeline:
        return (
            f"{a.num_layers} layer(s) do not split into {pipeline} equal pipeline stages: use a "
            f"--pipeline-parallel that divides {a.num_layers}, or more layers"
        )
    if a.vocab_size % tensor if even_vocab else a.vocab_size < tensor:
        return f"a vocabulary of {a.vocab_size} does not split {'evenly ' if even_vocab else ''}over {tensor} ranks"
    return None


def _options(spec: PointSpec, caps: Capabilities) -> str | None:
    if spec.channels_last:
        if not caps.channels_last:
            return caps.channels_last_why or f"dlbench's {spec.framework} backend offers no channels-last"
        case = get_case(spec.model)
        if not isinstance(case.input, ImageInput):
            return "channels-last applies to image models only"
        if (
            caps.channels_last_archs
            and type(case.configured(spec.params).arch).__name__ not in caps.channels_last_archs
        ):
            return caps.channels_last_why or f"dlbench's {spec.framework} backend builds {case.name} NCHW only"
    if spec.compile and not caps.compile:
        return caps.compile_why or f"dlbench's {spec.framework} backend has no compile switch: drop --compile"
    if spec.compile and caps.no_compile_archs:
        arch = type(get_case(spec.model).configured(spec.params).arch).__name__
        why = dict(caps.no_compile_archs).get(arch)
        if why:
            return why
    if spec.compile and spec.world_size > 1 and caps.multi_device_compile_why:
        return caps.multi_device_compile_why
    return None


__all__ = ["Impossible", "impossible", "label", "possible", "refusal", "refuse_impossible"]
