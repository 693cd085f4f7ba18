"""PyTorch backend: builds the case's model (no torchvision), its input and a TorchTrainer.

On a GPU it applies the numerics policy (dlbench.numerics: TF32 turned off for fp32, on for tf32, read back
and recorded), cudnn.benchmark (as NVIDIA's and torchvision's reference scripts do) and fused optimizers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import torch

from dlbench.backends.base import Backend, Trainer, Unsupported, gpu_binding_problem
from dlbench.backends.context import BuildContext
from dlbench.backends.cuda_driver import no_device_reason
from dlbench.backends.gpu_arch import GpuBuild
from dlbench.backends.torch import data, distributed, dlrm, fp8, split
from dlbench.backends.torch.distributed import GradSync
from dlbench.backends.torch.models import MODELS, attention_kernels, build_model, count_trainable
from dlbench.backends.torch.moe import set_balanced, with_bias_balance
from dlbench.backends.torch.step import AMP_DTYPES, TorchTrainer
from dlbench.cases import Case, TextInput
from dlbench.cases.arch import DitConfig, DlrmArch, LlamaConfig, MoeConfig
from dlbench.cases.dit import point_figures as dit_figures
from dlbench.cases.dlrm import point_figures as dlrm_figures
from dlbench.cases.lora import lora_of
from dlbench.cases.moe import point_figures
from dlbench.numerics import LOSS_SCALE_INIT, describe, resolve_precision
from dlbench.spec import PointSpec
from dlbench.wire import RankContext

# Out-of-memory errors torch raises as plain RuntimeErrors (cuBLAS handle or workspace allocation; the CPU
# allocator refusing a tensor, e.g. a Wide & Deep table larger than the memory left).
_OOM_TEXT: tuple[str, ...] = (
    "CUDA out of memory",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "CUDA error: out of memory",
    "DefaultCPUAllocator: can't allocate memory",
)

# torch's out-of-memory exception types: torch.OutOfMemoryError from 2.5, torch.cuda.OutOfMemoryError before (the
# extra allows 2.1); whichever this torch has, never an AttributeError inside the worker's `except`.
_OOM_TYPES: tuple[type[BaseException], ...] = tuple(
    t
    for t in (getattr(torch, "OutOfMemoryError", None), getattr(torch.cuda, "OutOfMemoryError", None))
    if isinstance(t, type) and issubclass(t, BaseException)
)

# Wide & Deep's sparse tables train with torch's own lazy Adam, which waits for the device every step; recorded on
# the point, as the TF and Paddle amp host reads are, so that it reads as torch's cost and not dlbench's.
SPARSE_ADAM_SYNC = (
    "torch.optim.SparseAdam coalesces each step's sparse table gradients, which on a GPU reads their "
    "row count on the host (a device sync per step); under amp the GradScaler also reads its overflow "
    "flag on the host, as SparseAdam cannot skip a step on the device. The dense path (sparse=0) "
    "does neither."
)


def set_tf32(allow: bool) -> None:
    """TF32 for matmuls and cuDNN convolutions on or off. Where torch has the fp32_precision API (2.9+), the legacy
    switches are set first and then every fp32_precision value: reading a legacy getter (`allow_tf32`,
    `get_float32_matmul_precision()`, as Inductor does) after only the new API was set raises "mix of the legacy
    and new APIs", and so would `--compile` on a GPU."""
    torch.backends.cuda.matmul.allow_tf32 = allow
    torch.backends.cudnn.allow_tf32 = allow
    cudnn: Any = torch.backends.cudnn  # conv and rnn (torch >= 2.9) are missing from older torch's stubs
    if hasattr(torch.backends, "fp32_precision"):
        mode = "tf32" if allow else "ieee"
        torch.backends.fp32_precision = mode
        torch.backends.cuda.matmul.fp32_precision = mode
        torch.backends.cudnn.fp32_precision = mode
        cudnn.conv.fp32_precision = mode
        cudnn.rnn.fp32_precision = mode


def tf32_state() -> dict[str, str]:
    """Whether matmuls and convolutions may use TF32, read back from torch."""
    if hasattr(torch.backends, "fp32_precision"):
        return {
            "tf32_matmul": str(torch.backends.cuda.matmul.fp32_precision == "tf32"),
            "tf32_conv": str(cast(Any, torch.backends.cudnn).conv.fp32_precision == "tf32"),
        }
    return {
        "tf32_matmul": str(torch.backends.cuda.matmul.allow_tf32),
        "tf32_conv": str(torch.backends.cudnn.allow_tf32),
    }


def _fp8_refusal(spec: PointSpec) -> str | None:
    """Why fp8 cannot train this point here (one line), or None: torchao installed, the GPU's FP8 tensor cores."""
    if spec.precision != "fp8":
        return None
    cuda = spec.device == "cuda" and torch.cuda.is_available()
    return fp8.refusal(torch.cuda.get_device_capability() if cuda else None)


def _placed(
    spec: PointSpec, case: Case, ctx: RankContext, device: torch.device
) -> tuple[torch.nn.Module, GradSync, dict[str, object], dict[str, object] | None]:
    """The model built on its device and wrapped for its strategy (several devices: the process group, DDP or an
    expert-parallel exchange, #36), with what the strategy runs and fp8's facts."""
    groups = None
    if spec.layout.expert_parallel > 1:
        from dlbench.backends.torch import moe_parallel  # the distributed machinery, only where it is used

        groups = moe_parallel.expert_groups(spec, device, ctx)
    model = build_model(case, BuildContext.of(spec, ctx, device, groups)).to(device)
    if spec.layout.routing == "balanced":
        set_balanced(model, True)
    fp8_facts = fp8.convert(model) if spec.precision == "fp8" else None  # torchao float8 linears (#35)
    if spec.channels_last:
        # Module.to takes memory_format at run time; its typed overloads leave it out
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    if groups is not None:
        model, sync, ran = moe_parallel.setup(model, groups)
        ran["exchange"] = groups
        return model, with_bias_balance(model, sync), ran, fp8_facts  # DeepSeek-V3's bias balance after the step
    if spec.layout.fsdp:  # a DiT sharded over the ranks (#48); the llama family's --fsdp goes through split.build
        from dlbench.backends.torch import dit_parallel

        return (
            *dit_parallel.setup(spec, model, device, ctx, resolve_precision(spec.precision, spec.device)),
            fp8_facts,
        )
    model, sync, ran = distributed.setup(spec, model, device, ctx)  # several devices: process group, strategy
    return model, with_bias_balance(model, sync), ran, fp8_facts


class TorchBackend(Backend):
    """How PyTorch trains a case."""

    name = "torch"
    title = "PyTorch"
    _autotune = True  # cuDNN autotuning (torch.backends.cudnn.benchmark); off for the cuDNN retry

    def cases(self) -> frozenset[str]:
        return frozenset(MODELS)

    def environment(self, spec: PointSpec) -> dict[str, str]:
        env = {"framework_version": torch.__version__, "torch_threads": str(torch.get_num_threads())}
        numerics = resolve_precision(spec.precision, spec.device)
        if spec.device == "cuda" and torch.cuda.is_available():
            index = torch.cuda.current_device()
            env["device_model"] = torch.cuda.get_device_name(index)
            env["cuda"] = str(torch.version.cuda)
            env["cudnn"] = str(torch.backends.cudnn.version())
            nccl = torch.cuda.nccl.version() if hasattr(torch.cuda, "nccl") else None
            env["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl or "")
            state = tf32_state()
            env.update(state)
            env["cudnn_benchmark"] = str(torch.backends.cudnn.benchmark)
            env["math_mode"] = describe(numerics, tf32_in_use="True" in state.values())
        else:
            env["math_mode"] = numerics.math_mode
        env.update(distributed.environment(spec))
        return env

    def refuse(self, spec: PointSpec) -> str | None:
        """What only this torch can tell (the rules the spec shows are the capability table's): a GPU it sees,
        torchao and the GPU's FP8 tensor cores for fp8."""
        if spec.device == "cuda" and not torch.cuda.is_available():
            return no_device_reason("torch", str(torch.version.cuda or ""))
        return _fp8_refusal(spec)

    def build(self, spec: PointSpec, case: Case, ctx: RankContext) -> Trainer:
        numerics = resolve_precision(spec.precision, spec.device)
        torch.manual_seed(spec.seed)
        if spec.threads:
            torch.set_num_threads(spec.threads)
        device = distributed.device_for(spec, ctx)
        if device.type == "cuda":
            problem = gpu_binding_problem(ctx, torch.cuda.device_count())
            if problem:
                raise Unsupported(problem)
            torch.cuda.set_device(device)
            set_tf32(numerics.allow_tf32)
            torch.backends.cudnn.benchmark = self._autotune  # fastest conv algorithms in the warm-up (cudnn_fallback)
        if spec.layout.splits_model or (spec.layout.fsdp and not isinstance(case.arch, DitConfig)):  # (pp, dp, tp) mesh
            return split.build(spec, case, ctx, device, numerics, self._facts)
        model, sync, ran, fp8_facts = _placed(spec, case, ctx, device)
        seed = spec.seed + ctx.rank  # each rank its own samples; rank 0 is the 1-device batch
        feed = spec  # dp: one process feeds the global batch, DataParallel splits it
        if distributed.strategy(spec) == "dp":
            feed = dataclasses.replace(spec, batch_size=spec.global_batch)
        self._facts = {
            **ran,
            "compiled": "torch.compile" if spec.compile else "eager",
            "loader": data.describe(spec),
            "optimizer": f"{case.optimizer.name}{' (fused)' if device.type == 'cuda' else ''}",
            "channels_last": spec.channels_last,
            "loss_scaling": (
                f"GradScaler (dynamic, initial scale {LOSS_SCALE_INIT:g})" if numerics.loss_scaling else "none"
            ),
        }
        if fp8_facts is not None:
            self._facts["fp8"] = fp8_facts
        if case.loss.kind == "mlm_nsp":
            masked = spec.data == "real"  # synthetic batches attend to every token: no mask (data.every_token_real)
            seq = spec.input_size or (case.input.seq_len if isinstance(case.input, TextInput) else 0)
            self._facts["attention"] = attention_kernels(
                case, seq, masked, device, AMP_DTYPES.get(numerics.compute_dtype, torch.float32)
            )
        self._exchange = self._facts.pop("exchange", None)  # the expert-parallel exchange's clock (#36)
        self._decoder_facts(spec, case, model)
        if hasattr(model, "embedding_path"):  # Wide & Deep: which embedding machinery trained the tables
            self._facts["embedding"] = cast(Any, model).embedding_path()
            if getattr(model, "sparse", False):
                self._facts["host_sync_per_step"] = SPARSE_ADAM_SYNC
        trainer = TorchTrainer(
            case,
            model,
            data.batches(feed, case, device, seed),
            device,
            numerics,
            spec.compile,
            spec.global_batch,
            sync=sync,
        )
        self._mlperf(spec, case, trainer, device)
        return trainer

    def _mlperf(self, spec: PointSpec, case: Case, trainer: TorchTrainer, device: torch.device) -> None:
        """MLPerf's workloads (#47): a DLRM's figures, and under --converge its held-out AUC scorer; a LoRA point
        fine-tunes (under --converge) the base dlbench pretrained."""
        if isinstance(case.arch, DlrmArch):
            figures = dlrm_figures(case)
            if spec.world_size == 1:
                figures["sharding"] = "one device: every table"
            self._facts["dlrm"] = figures
            if spec.converge:  # judged by its held-out AUC
                trainer.scorer = dlrm.held_out_scorer(trainer.model, case, device)
        if spec.converge and lora_of(case) is not None:
            from dlbench.backends.torch.lora import load_pretrained

            self._facts["lora_base"] = load_pretrained(trainer.model, case, spec.input_size, device)

    def evaluator(self, spec: PointSpec, case: Case, weights: Path) -> Callable[[dict[str, Any]], dict[str, Any]]:
        from dlbench.backends.torch import evaluate  # the evaluation process's own path: the model and its forward

        return evaluate.evaluator(spec, case, weights)

    def autotune_off(self) -> bool:
        """cuDNN autotuning off for the next build, and the failed try's cached blocks freed."""
        self._autotune = False
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return True

    def memory_used_share(self) -> float | None:
        if not torch.cuda.is_available():
            return None
        free, total = torch.cuda.mem_get_info()
        return 1 - free / total if total else None

    def _decoder_facts(self, spec: PointSpec, case: Case, model: torch.nn.Module) -> None:
        """A decoder's FLOPs and convention; a MoE's total and active parameters and routing policy (#36), and
        the model whose routing counters facts() reads; a DiT's FLOPs per image and what its step times (#48)."""
        if isinstance(case.arch, MoeConfig):
            self._facts["moe"] = point_figures(case, spec.input_size)
            self._routed = model
        elif isinstance(case.arch, DitConfig):  # its FLOPs per image and what the step times (#48)
            self._facts["dit"] = dit_figures(case, spec.input_size)
        elif case.loss.kind == "causal_lm":
            self._facts[split.FLOPS_KEY[isinstance(case.arch, LlamaConfig)]] = split.flops_facts(spec, case)
            adapters = split.lora_facts(spec, case)  # LoRA (#47): trainable and frozen counts, FLOPs both ways
            if adapters is not None:
                self._facts["lora"] = adapters

    def facts(self) -> dict[str, object]:
        """What build chose; a MoE point adds its routing figures, read once from the device here (moe.py)."""
        out = dict(self._facts)
        routed = getattr(self, "_routed", None)
        if routed is not None:
            from dlbench.backends.torch.moe import HOST_SYNC_KEY, host_sync_figures, routing_figures

            out["routing"] = routing_figures(routed)  # over the default group: every rank the point trains on
            out[HOST_SYNC_KEY] = host_sync_figures(routed)
        groups = getattr(self, "_exchange", None)
        if groups is not None:
            from dlbench.backends.torch.moe_parallel import exchange_figures

            cast(dict[str, object], out["routing"]).update(exchange_figures(cast(Any, groups)))
        return out

    def count_params(self, case: Case) -> int:
        with torch.device("meta"):  # shapes only: no weights made (the 8B would take 32 GB), so `list` is quick
            return count_trainable(build_model(case))

    def oom_error(self, exc: BaseException) -> bool:
        if isinstance(exc, (MemoryError, *_OOM_TYPES)):
            return True
        return isinstance(exc, RuntimeError) and any(text in str(exc) for text in _OOM_TEXT)

    def gpu_build(self) -> GpuBuild | None:
        if not torch.version.cuda:  # a CPU (or ROCm) build
            return None
        return GpuBuild(
            "torch", str(torch.version.cuda), tuple(torch.cuda.get_arch_list()), "torch.cuda.get_arch_list()"
        )
