"""JAX/Flax backend: flax.linen models built from the cases' tables, synthetic data or real data through Grain,
one jitted train step; on several processes, data parallel over a global mesh (distributed.py).

What build sets, each recorded: the numerics policy (dlbench.numerics) as JAX's default matmul/conv precision
for 32-bit inputs ("highest" = IEEE fp32; "tensorfloat32" for tf32: XLA uses TF32 on Ampere and later GPUs when
left at its default), read back into math_mode; no GPU preallocation (package __init__); a persistent
compilation cache shared by every single-process point (max-batch probes recompile the same shapes).
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

from dlbench.backends.base import Backend, Trainer, Unsupported, gpu_binding_problem
from dlbench.backends.jax import (
    PREALLOCATE_VAR,
    data,
    distributed,
    dlrm,
    llama_mesh,
    memory_fraction_fact,
    tensor_parallel,
    wide_deep,
)
from dlbench.backends.jax.distributed import Placement
from dlbench.backends.jax.models import MODELS, build_module, model_inputs
from dlbench.backends.jax.step import JaxTrainer, State, lora_labels, loss_scale, make_optimizer, make_train_step
from dlbench.cases import Case
from dlbench.cases.arch import DitConfig, DlrmArch, LlamaConfig
from dlbench.cases.dit import point_figures as dit_figures
from dlbench.cases.dlrm import point_figures as dlrm_figures
from dlbench.cases.lora import lora_of
from dlbench.machine.nvml import gpu_info
from dlbench.numerics import Numerics, describe, resolve_precision
from dlbench.paths import cache_dir
from dlbench.spec import PointSpec
from dlbench.wire import RankContext

_DTYPES: dict[str, Any] = {"float32": jnp.float32, "float16": jnp.float16, "bfloat16": jnp.bfloat16}
PRECISION_KEY = "jax_default_matmul_precision"
IEEE_PRECISIONS = frozenset({"highest", "float32"})  # JAX's names of full fp32 matmul and conv precision


def limit_threads(threads: int | None, ctx: RankContext) -> int:
    """Pin this process to `threads` CPUs before XLA starts (its CPU thread pool follows the affinity); ranks
    sharing a node take consecutive, disjoint CPUs (by local rank) while there are enough."""
    cpus = sorted(os.sched_getaffinity(0))
    want = threads or int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
    if want and want < len(cpus):
        first = ctx.local_rank * want
        first = first if first + want <= len(cpus) else 0
        os.sched_setaffinity(0, cpus[first : first + want])
        return want
    return len(cpus)


def read_precision() -> str | None:
    """JAX's default precision of 32-bit matmuls and convolutions, as set (None: XLA's default, TF32 on GPUs)."""
    value = jax.config.jax_default_matmul_precision
    return None if value is None else str(value)


def apply_numerics(numerics: Numerics) -> str:
    """Set JAX's default precision of 32-bit matmuls and convolutions for the policy, and read it back."""
    jax.config.update(PRECISION_KEY, "tensorfloat32" if numerics.allow_tf32 else "highest")
    return str(read_precision())


def _example(case: Case, input_size: int | None) -> tuple[jax.ShapeDtypeStruct, ...]:
    """Abstract model inputs of one sample, in the shapes and dtypes the data feeds."""
    arrays = data.synthetic_arrays(case, 1, input_size, 0)
    return tuple(jax.ShapeDtypeStruct(x.shape, x.dtype) for x in model_inputs(case, arrays))


def make_state(
    case: Case,
    dtype: Any,
    input_size: int | None,
    seed: int,
    device: jax.Device,
    global_batch: int,
    recompute: bool = False,
) -> State:
    """Parameters (float32) and optimizer state on this process's device, the same on every process for a
    seed; fp16 adds dynamic loss scaling."""
    module = build_module(case, dtype, recompute)
    with jax.default_device(device):
        k_params, k_dropout, k_state = jax.random.split(jax.random.PRNGKey(seed), 3)
        variables = module.lazy_init(
            {"params": k_params, "dropout": k_dropout}, *_example(case, input_size), train=True
        )
        scale = loss_scale(dtype)
        return State.create(
            apply_fn=module.apply,
            params=variables["params"],
            tx=make_optimizer(case, global_batch),
            batch_stats=variables.get("batch_stats", {}),
            key=k_state,
            dynamic_scale=scale,
        )


def _placement(spec: PointSpec, case: Case, device: jax.Device) -> tuple[Placement, dict[str, object]]:
    """Where the point's state and batch live, and the facts that say so: one device or the processes' devices
    (a batch sharded over them), a GPT's (data, model) mesh (#23), or a Llama's (data, fsdp, tensor) mesh (#35)."""
    devices = jax.devices(device.platform)
    if isinstance(case.arch, LlamaConfig) and (spec.layout.fsdp or spec.layout.tensor_parallel > 1):
        mesh = llama_mesh.LlamaPlacement.for_spec(devices, spec)
        return mesh, {
            "layout": spec.layout.label + (" FSDP" if spec.layout.fsdp else ""),
            "jax_mesh": " x ".join(f"{axis} {n}" for axis, n in mesh.shape.items()),
            "tensor_parallel": "GSPMD: NamedSharding over a (data, fsdp, tensor) mesh, Megatron's column/row split "
            "over tensor, each kernel's other dimension over fsdp (ZeRO-3), norms replicated",
        }
    if spec.layout.tensor_parallel > 1:
        return tensor_parallel.TensorPlacement.of(devices, spec.layout), {
            "layout": spec.layout.label,
            "tensor_parallel": "GSPMD: NamedSharding of the weights over "
            "a (data, model) mesh, Megatron's column/row split, vocabulary-parallel embedding",
        }
    return distributed.placement(spec, device), {}


def make_trainer(
    spec: PointSpec, case: Case, dtype: Any, device: jax.Device, where: Placement, rank: int
) -> JaxTrainer:
    """The state replicated on the placement's mesh (split where the point is tensor parallel), the jitted step,
    and this rank's input (seed + its data-parallel replica: a replica's processes share their rows)."""
    state = where.replicate(
        make_state(case, dtype, spec.input_size, spec.seed, device, spec.global_batch, spec.layout.recompute)
    )
    with jax.default_device(device):
        batches = data.batches(spec, case, where, spec.seed + rank // spec.layout.tensor_parallel)
    if isinstance(where, tensor_parallel.TensorPlacement | llama_mesh.LlamaPlacement):
        step = make_train_step(case, where, where.state_shardings(state))
        return tensor_parallel.TensorTrainer(batches, state, step, device, where)
    return JaxTrainer(batches, state, make_train_step(case, where), device)


def _table_facts(case: Case) -> dict[str, object]:
    """How Wide & Deep's and DLRM's tables train, and a DLRM's figures (#47); nothing for another case."""
    if case.loss.kind != "bce":
        return {}
    if isinstance(case.arch, DlrmArch):
        return {"embedding": dlrm.EMBEDDING_PATH, "dlrm": dlrm_figures(case)}
    return {"embedding": wide_deep.EMBEDDING_PATH}


def _case_facts(case: Case, input_size: int | None) -> dict[str, object]:
    """The tables' facts (`_table_facts`), and a DiT's FLOPs per image and what its step times (#48)."""
    out = _table_facts(case)
    if isinstance(case.arch, DitConfig):
        out["dit"] = dit_figures(case, input_size)
    return out


def count_leaves(tree: Any) -> int:
    """Total number of elements in a pytree of arrays or shape structs."""
    return sum(int(x.size) for x in jax.tree_util.tree_leaves(tree))


def restrict_gpus(gpu: int) -> None:
    """JAX's GPU client on this process's GPU only (its ordinal among the visible ones), as jax.distributed does
    for a rank's local devices: set before the client starts, which creates a context on each GPU it may use."""
    jax.config.update("jax_cuda_visible_devices", str(gpu))


def _visible_gpus() -> int:
    """GPUs this process may use, counted through NVML (CUDA_VISIBLE_DEVICES honoured) without starting JAX's
    GPU client, which must not start before jax.distributed.initialize."""
    return len(gpu_info().devices)


class JaxBackend(Backend):
    """How JAX/Flax trains a case. JAX always compiles the step with XLA (jax.jit)."""

    name = "jax"
    title = "JAX/Flax"

    def cases(self) -> frozenset[str]:
        return frozenset(MODELS)

    def environment(self, spec: PointSpec) -> dict[str, str]:
        numerics = resolve_precision(spec.precision, spec.device)
        precision = read_precision()
        env = {
            "framework_version": jax.__version__,
            "jaxlib": importlib.metadata.version("jaxlib"),
            "flax": importlib.metadata.version("flax"),
            "optax": importlib.metadata.version("optax"),
            "jax_platform": jax.default_backend(),
            "xla_cpu_threads": str(len(os.sched_getaffinity(0))),
            "jax_matmul_precision": precision or "default",
        }
        if spec.device == "cuda" and jax.default_backend() == "gpu":
            env["device_model"] = jax.local_devices(backend="gpu")[0].device_kind
            env["math_mode"] = describe(numerics, tf32_in_use=precision not in IEEE_PRECISIONS)
        else:
            env["math_mode"] = numerics.math_mode
        env.update(distributed.facts(spec))
        return env

    def no_gpu_reason(self, spec: PointSpec) -> str | None:
        """Whether JAX's default backend is its GPU one (starts JAX's client: no point runs in this process)."""
        if jax.default_backend() != "gpu":
            return f"JAX here has no GPU backend (its default backend is {jax.default_backend()}): install jax[cuda13]"
        return None

    def build(self, spec: PointSpec, case: Case, ctx: RankContext) -> Trainer:
        numerics = resolve_precision(spec.precision, spec.device)
        limit_threads(spec.threads, ctx)
        gpu: int | None = None
        if spec.device == "cuda":
            visible = _visible_gpus()
            problem = gpu_binding_problem(ctx, visible)
            if problem:
                raise Unsupported(problem)
            gpu = ctx.device_index(visible)
            if spec.processes == 1:  # JAX would start a context (0.3-0.6 GB) on every visible GPU, not only ours
                restrict_gpus(gpu)
        distributed.join(spec, ctx, gpu if spec.processes > 1 else None)  # before any JAX backend starts
        precision = apply_numerics(numerics)
        cache = str(cache_dir("jax")) if spec.processes == 1 else "off: several processes"
        # One process only: two gloo ranks reading one cache hung after their first step (jax 0.10.2, CPU;
        # test_real_images_on_two_processes), and ran without it.
        if spec.processes == 1:
            jax.config.update("jax_compilation_cache_dir", cache)
        platform = "gpu" if spec.device == "cuda" else "cpu"
        try:
            local = jax.local_devices(backend=platform)
        except RuntimeError as exc:
            raise Unsupported("jax here has no GPU backend (a CPU jaxlib, or no GPU): use --device cpu") from exc
        device = local[ctx.device_index(len(local))] if spec.processes == 1 else local[0]
        self._facts = {
            "compiled": "jit (always)",
            "loader": data.describe(spec),
            "device": str(device),
            "jax_default_matmul_precision": precision,
            "jax_compilation_cache_dir": cache,
            "loss_scaling": "flax DynamicScale" if numerics.loss_scaling else "none",
            "donated_state": True,
        }
        self._facts.update(_case_facts(case, spec.input_size))
        if platform == "gpu":
            self._facts[PREALLOCATE_VAR] = os.environ.get(PREALLOCATE_VAR, "")
            self._facts["xla_gpu_memory_fraction"] = memory_fraction_fact(os.environ)
            self._facts["jax_cuda_visible_devices"] = str(jax.config.jax_cuda_visible_devices)
        if distributed.strategy(spec) != "none":
            self._facts.update(strategy=distributed.strategy(spec), jax_processes=jax.process_count())
            if device.platform == "cpu":
                self._facts["cpu_collectives"] = distributed.CPU_COLLECTIVES
        where, facts = _placement(spec, case, device)
        self._facts.update(facts)
        if spec.layout.recompute:
            self._facts["recompute"] = "flax nn.remat per block"
        trainer = make_trainer(spec, case, _DTYPES[numerics.compute_dtype], device, where, jax.process_index())
        if spec.converge and isinstance(case.arch, DlrmArch):  # judged by its held-out AUC (#47)
            trainer.scorer = dlrm.held_out_scorer(case, trainer.state.apply_fn, lambda: trainer.state.params)
        if spec.converge and lora_of(case) is not None and spec.processes == 1:  # fine-tunes dlbench's base (#47)
            from dlbench.backends.jax.lora import load_pretrained

            self._facts["lora_base"] = load_pretrained(trainer, case, spec.input_size, device)
        return trainer

    def evaluator(self, spec: PointSpec, case: Case, weights: Path) -> Callable[[dict[str, Any]], dict[str, Any]]:
        from dlbench.backends.jax import evaluate  # the evaluation process's own path: the module and its forward

        return evaluate.evaluator(spec, case, weights)

    def count_params(self, case: Case) -> int:
        module = build_module(case)
        keys = {"params": jax.random.PRNGKey(0), "dropout": jax.random.PRNGKey(1)}
        shapes = jax.eval_shape(lambda k, *xs: module.init(k, *xs, train=True), keys, *_example(case, None))
        if lora_of(case) is not None:  # LoRA (#47): only the adapters train
            labels = jax.tree_util.tree_leaves(lora_labels(shapes["params"]))
            return sum(int(x.size) for x, t in zip(jax.tree_util.tree_leaves(shapes["params"]), labels) if t == "train")
        return count_leaves(shapes["params"])  # batch_stats are not trainable

    def oom_error(self, exc: BaseException) -> bool:
        if isinstance(exc, MemoryError):
            return True
        return isinstance(exc, jax.errors.JaxRuntimeError) and str(exc).lstrip().startswith("RESOURCE_EXHAUSTED")
