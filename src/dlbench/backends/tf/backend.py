"""TensorFlow/Keras backend: the case's Keras model (models.py), its input (data.py) and a TfTrainer (step.py).

Mapping of dlbench's options, after the numerics policy (dlbench.numerics):
- fp32 -> Keras policy "float32" with TF32 turned OFF (``enable_tensor_float_32_execution(False)``: TF uses
  TF32 for matmuls and convolutions by default on Ampere and later GPUs); tf32 (GPU only) -> "float32" with
  TF32 on; amp (GPU only) -> "mixed_float16" with a dynamic ``LossScaleOptimizer``; bf16 -> "mixed_bfloat16".
  The TF32 flag and the policy are read back into ``math_mode``.
- GPUs: memory growth on every visible GPU (TF reserves almost all of a GPU's memory otherwise, so neither the
  device peak nor max batch would mean anything); a worker of a multi-process point sees only its rank's GPU
  (``RankContext.device_index``); ``mirrored`` is one process over the node's GPUs (distributed.py).
- --compile -> XLA (``tf.function(jit_compile=True)``). Layout is always NHWC, TF's native one, so
  --channels-last changes nothing and every result records ``layout: NHWC``. Threads come from --threads (the
  worker also exports it as OMP_NUM_THREADS) and set both TF thread pools.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import keras
import tensorflow as tf

from dlbench.backends.base import Backend, Trainer, Unsupported, gpu_binding_problem
from dlbench.backends.decoder import decoder_facts, moe_shape_refusal
from dlbench.backends.gpu_arch import GpuBuild
from dlbench.backends.keras.moe import DISPATCH, MoeModel
from dlbench.backends.tf import data, distributed, parameter_server, variables
from dlbench.backends.tf.models import MODELS, build_model, count_case
from dlbench.backends.tf.step import AMP_HOST_SYNC, TfTrainer
from dlbench.backends.tf.wide_deep import EMBEDDING_PATH
from dlbench.cases import Case
from dlbench.numerics import Numerics, resolve_precision
from dlbench.spec import PointSpec
from dlbench.wire import RankContext

_POLICY: dict[str, str] = {"float32": "float32", "float16": "mixed_float16", "bfloat16": "mixed_bfloat16"}
_MATH_MODE: dict[str, str] = {"float16": "fp16", "bfloat16": "bf16"}  # Keras compute dtype -> math mode
# Out-of-memory failures TF reports as another OpError class: XLA's GPU compiler loading a kernel image
# ("Failed to load in-memory CUBIN: CUDA_ERROR_OUT_OF_MEMORY", tensorflow#60607, an InternalError), or a
# status whose code is RESOURCE_EXHAUSTED but which arrives re-wrapped by a tf.function call.
_OOM_TEXT: tuple[str, ...] = (
    "CUDA_ERROR_OUT_OF_MEMORY",
    "RESOURCE_EXHAUSTED",
    "Out of memory while trying to allocate",
)


def policy_name(numerics: Numerics) -> str:
    """The Keras mixed-precision policy of a resolved precision."""
    return _POLICY[numerics.compute_dtype]


def apply_numerics(numerics: Numerics) -> None:
    """Set the Keras global policy and TF's TF32 switch for the precision (TF32 only for tf32)."""
    tf.config.experimental.enable_tensor_float_32_execution(numerics.allow_tf32)
    keras.mixed_precision.set_global_policy(policy_name(numerics))


def math_mode(on_gpu: bool) -> str:
    """The effective math mode read back from TF: the Keras policy's compute dtype, and for float32 on a GPU
    whether TF32 execution is enabled (TF32 does not exist on the CPU)."""
    compute = keras.mixed_precision.global_policy().compute_dtype
    if compute in _MATH_MODE:
        return _MATH_MODE[compute]
    return "tf32" if on_gpu and tf.config.experimental.tensor_float_32_execution_enabled() else "fp32"


def _gpus() -> list[tf.config.PhysicalDevice]:
    return list(tf.config.list_physical_devices("GPU"))


def _facts(spec: PointSpec, case: Case, numerics: Numerics, applied: dict[str, object]) -> dict[str, object]:
    """What every TF point records: compilation, layout, precision policy and loss scaling (with the host sync it
    costs), TF32, the Keras version, the loader, what `_configure` applied, and how Wide & Deep's tables train."""
    facts: dict[str, object] = {
        "compiled": "xla" if spec.compile else "none",
        "layout": "NHWC",
        "precision_policy": policy_name(numerics),
        "loss_scale": "dynamic" if numerics.loss_scaling else "none",
        "tf32_execution": tf.config.experimental.tensor_float_32_execution_enabled(),
        "keras_version": keras.__version__,
        "loader": data.describe(spec),
        **applied,
    }
    if numerics.loss_scaling:
        facts["amp_host_sync"] = AMP_HOST_SYNC
    if case.loss.kind == "bce":  # Wide & Deep: how its tables train
        facts["embedding"] = EMBEDDING_PATH
    facts.update(decoder_facts(case, spec.input_size))  # a decoder's FLOPs convention, a MoE's figures
    return facts


class TfBackend(Backend):
    """How TensorFlow/Keras trains a case."""

    name = "tf"
    title = "TensorFlow/Keras"

    def gpu_build(self) -> GpuBuild | None:
        """The CUDA version and kernel architectures of a CUDA build, from tf.sysconfig's build info."""
        info = tf.sysconfig.get_build_info()
        if not info.get("is_cuda_build"):
            return None
        archs = tuple(str(a) for a in info.get("cuda_compute_capabilities", []) or [])
        return GpuBuild("tf", str(info.get("cuda_version", "")), archs, "tf.sysconfig.get_build_info()")

    def __init__(self) -> None:
        super().__init__()
        self._configured = False
        self._built = False
        self._routed: MoeModel | None = None  # a MoE point's model, whose routing facts() reads

    def cases(self) -> frozenset[str]:
        return frozenset(MODELS)

    def _configure(self, spec: PointSpec, ctx: RankContext) -> dict[str, object]:
        """Threads and visible GPUs (each with memory growth): must happen before TF's runtime starts, so once
        and first. Returns what it applied, for the facts."""
        if self._configured:
            return {}
        self._configured = True
        applied: dict[str, object] = {}
        threads = spec.threads or int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
        try:
            if threads:
                tf.config.threading.set_intra_op_parallelism_threads(threads)
                tf.config.threading.set_inter_op_parallelism_threads(distributed.inter_op_threads(spec, threads))
            gpus = _gpus()
            if spec.device == "cpu" or distributed.strategy_name(spec) == "ps":  # ps: the coordinator computes nothing
                tf.config.set_visible_devices([], "GPU")
                if distributed.strategy_name(spec) in variables.STRATEGIES and spec.devices_per_node > 1:
                    variables.split_cpu(spec.devices_per_node + 1)  # N compute devices and the host
                    applied["logical_cpu_devices"] = spec.devices_per_node + 1
            elif gpus:
                problem = gpu_binding_problem(ctx, len(gpus)) if spec.processes > 1 else None
                if problem:
                    raise Unsupported(problem)
                if not distributed.drives_all(spec):  # this rank's GPU only
                    gpus = [gpus[ctx.device_index(len(gpus))]]
                    tf.config.set_visible_devices(gpus, "GPU")
                for gpu in gpus:  # grow on demand, so that the peak we report is what the step needed
                    tf.config.experimental.set_memory_growth(gpu, True)
                applied["gpu_memory_growth"] = True
                applied["visible_gpus"] = ",".join(g.name.removeprefix("/physical_device:") for g in gpus)
        except RuntimeError as exc:  # the runtime had already started (several builds in one process, e.g. checks)
            applied["runtime_config"] = f"not applied, TF had started: {exc}"[:200]
        return applied

    def environment(self, spec: PointSpec) -> dict[str, str]:
        on_gpu = spec.device == "cuda"
        env = {
            "framework_version": tf.__version__,
            "keras_version": keras.__version__,
            "tf_intra_op_threads": str(tf.config.threading.get_intra_op_parallelism_threads()),
            "tf_inter_op_threads": str(tf.config.threading.get_inter_op_parallelism_threads()),
            "tf32_execution": str(tf.config.experimental.tensor_float_32_execution_enabled()),
        }
        # What build configured, read back; before a build (a refused point) the precision's own mode.
        env["math_mode"] = (
            math_mode(on_gpu) if self._built else resolve_precision(spec.precision, spec.device).math_mode
        )
        gpus = tf.config.get_visible_devices("GPU") if on_gpu else []
        if gpus:
            details = tf.config.experimental.get_device_details(gpus[0])
            env["device_model"] = str(details.get("device_name", ""))
            build = tf.sysconfig.get_build_info()
            env["cuda"] = str(build.get("cuda_version", ""))
            env["cudnn"] = str(build.get("cudnn_version", ""))
        if distributed.strategy_name(spec) != "none":
            env["strategy_run"] = distributed.strategy_name(spec)
        return env

    def case_support(self, case: Case) -> str | None:
        missing = super().case_support(case)
        if missing is None and case.optimizer.weight_decay and case.optimizer.name != "adamw":
            return "the tf backend does not map torch-style (L2) weight decay yet"
        return missing or moe_shape_refusal(case)

    def facts(self) -> dict[str, object]:
        """What build chose; a MoE point adds the routing its steps did (backends/keras/moe.py)."""
        out = dict(self._facts)
        if self._routed is not None:
            out["routing"] = self._routed.routing_figures()
        return out

    def refuse(self, spec: PointSpec) -> str | None:
        """What only this TensorFlow can tell: the GPUs it sees (the rules the spec shows are the capability
        table's)."""
        if spec.device == "cuda" and not _gpus():
            return "TensorFlow here sees no GPU (tensorflow-cpu, or no CUDA device): use --device cpu"
        return distributed.refuse(spec, len(_gpus()))

    def build(self, spec: PointSpec, case: Case, ctx: RankContext) -> Trainer:
        applied = self._configure(spec, ctx)
        strategy = distributed.make_strategy(spec, ctx)  # first: before anything starts TF's context
        on_gpu = spec.device == "cuda"
        device = "/GPU:0" if on_gpu else "/CPU:0"  # the one visible GPU is this rank's
        numerics = resolve_precision(spec.precision, spec.device)
        keras.utils.set_random_seed(spec.seed)
        apply_numerics(numerics)
        self._built = True
        chosen = distributed.strategy_name(spec)
        managed = chosen in variables.STRATEGIES
        devices = variables.gpus(spec.devices_per_node) if on_gpu else variables.logical_cpus(spec.devices_per_node)
        if managed:  # variables where the strategy keeps them (its first copy)
            model = variables.build_placed(chosen, devices, lambda: build_model(case, spec.input_size))
        elif chosen == "ps":  # variables on the ps task, the model's steps on the worker servers
            ps_strategy = parameter_server.make_strategy(spec, ctx)
            with ps_strategy.scope():
                model = build_model(case, spec.input_size)
        else:
            with strategy.scope() if strategy else tf.device(device):  # variables mirrored on every replica
                model = build_model(case, spec.input_size)
        self._facts = _facts(spec, case, numerics, applied)
        if isinstance(model, MoeModel):
            self._routed = model
            self._facts["moe_dispatch"] = DISPATCH
        if chosen == "ps":
            self._facts.update(parameter_server.facts(spec))
            return parameter_server.PsTrainer(spec, case, ps_strategy, model)
        if managed:
            trainer = variables.VariableMgrTrainer(
                case,
                model,
                chosen,
                devices,
                variables.replica_batches(spec, case, devices),
                spec.global_batch,
                jit_compile=spec.compile,
            )
            self._facts.update(variables.facts(chosen, devices, trainer))
            return trainer
        if strategy is not None:
            self._facts.update(distributed.facts(spec, strategy))
            return distributed.TfDistTrainer(spec, case, strategy, model, numerics.loss_scaling, ctx)
        batches = data.batches(spec, case, device, spec.seed + ctx.rank)
        return TfTrainer(
            case,
            model,
            batches,
            device,
            jit_compile=spec.compile,
            loss_scale=numerics.loss_scaling,
            global_batch=spec.global_batch,
        )

    def evaluator(self, spec: PointSpec, case: Case, weights: Path) -> Callable[[dict[str, Any]], dict[str, Any]]:
        from dlbench.backends.tf import evaluate  # the evaluation process's own path: the model and its forward

        return evaluate.evaluator(spec, case, weights)

    def serve(self, spec: PointSpec, ctx: RankContext, results: list[Path]) -> None:
        """ps: worker server ctx.server (one per device) or the ps task (the last), until the coordinator is done."""
        parameter_server.serve(spec, ctx, results)

    def count_params(self, case: Case) -> int:
        keras.mixed_precision.set_global_policy("float32")
        with tf.device("/CPU:0"):
            n = count_case(case)
        keras.backend.clear_session()
        gc.collect()
        return n

    def oom_error(self, exc: BaseException) -> bool:
        """MemoryError; TF's ResourceExhaustedError (raised by eager ops, tf.function and XLA alike); or another
        TF OpError whose message is an out-of-memory one (XLA kernel loading, re-wrapped statuses)."""
        if isinstance(exc, (MemoryError, tf.errors.ResourceExhaustedError)):
            return True
        return isinstance(exc, tf.errors.OpError) and any(text in str(exc) for text in _OOM_TEXT)
