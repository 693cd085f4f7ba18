"""JAX/Flax backend: flax.linen models, synthetic data made on the device or real data through Grain, one
jitted train step; on several processes, data parallel over a global mesh (distributed.py)."""

from __future__ import annotations

import importlib.metadata
import os
from typing import Any

import jax
import jax.numpy as jnp
from flax import linen as nn
from flax.training.dynamic_scale import DynamicScale

from dlbench.backends.base import Backend, Trainer
from dlbench.backends.jax import distributed
from dlbench.backends.jax.bert import BertForPretraining
from dlbench.backends.jax.distributed import Placement
from dlbench.backends.jax.models import BUILDERS
from dlbench.backends.jax.step import JaxTrainer, State, make_optimizer, make_train_step
from dlbench.cases import Case, ImageInput, TextInput
from dlbench.spec import PointSpec


def _limit_threads(threads: int | None) -> int:
    """Pin this process to `threads` CPUs before XLA starts (its CPU thread pool follows the affinity); ranks
    sharing a node (LOCAL_RANK) take consecutive, disjoint CPUs while there are enough."""
    cpus = sorted(os.sched_getaffinity(0))
    want = threads or int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
    if want and want < len(cpus):
        first = int(os.environ.get("LOCAL_RANK", "0")) * want
        first = first if first + want <= len(cpus) else 0
        os.sched_setaffinity(0, cpus[first:first + want])
        return want
    return len(cpus)


def _platform(spec: PointSpec) -> str:
    return "gpu" if spec.device == "cuda" else "cpu"


def _dtype(spec: PointSpec, platform: str) -> Any:
    """Compute dtype: fp32; bf16; amp = bf16 on the CPU, fp16 (with dynamic loss scaling) on a GPU."""
    if spec.precision == "fp32":
        return jnp.float32
    if spec.precision == "amp" and platform == "gpu":
        return jnp.float16
    return jnp.bfloat16


def build_module(case: Case, dtype: Any = jnp.float32) -> nn.Module:
    """The flax module for a case (compute in dtype, parameters in float32)."""
    if case.task == "bert_pretraining":
        return BertForPretraining(dtype=dtype)
    classes = case.input.classes if isinstance(case.input, ImageInput) else 1000
    return BUILDERS[case.name](classes, dtype)


def _example(case: Case, batch: int, input_size: int | None) -> tuple[jax.ShapeDtypeStruct, ...]:
    """Abstract model inputs (NHWC images, or ids / segment ids / mask)."""
    if isinstance(case.input, ImageInput):
        side = input_size or case.input.size
        return (jax.ShapeDtypeStruct((batch, side, side, case.input.channels), jnp.float32),)
    seq = input_size or case.input.seq_len
    ids = jax.ShapeDtypeStruct((batch, seq), jnp.int32)
    return ids, ids, ids


def synthetic_batch(case: Case, batch: int, input_size: int | None, seed: int) -> dict[str, jax.Array]:
    """One fixed batch for the case, made on the default device; input_size shrinks images or sequences."""
    k = iter(jax.random.split(jax.random.PRNGKey(seed + 1), 5))
    if isinstance(case.input, ImageInput):
        side = input_size or case.input.size
        return {"images": jax.random.normal(next(k), (batch, side, side, case.input.channels), jnp.float32),
                "labels": jax.random.randint(next(k), (batch,), 0, case.input.classes)}
    assert isinstance(case.input, TextInput)
    seq = input_size or case.input.seq_len
    ids = jax.random.randint(next(k), (batch, seq), 0, case.input.vocab)
    masked = jax.random.uniform(next(k), (batch, seq)) < case.input.mask_prob
    return {"input_ids": ids,
            "token_type_ids": jnp.broadcast_to((jnp.arange(seq) >= seq // 2).astype(jnp.int32), (batch, seq)),
            "attention_mask": jnp.ones((batch, seq), jnp.int32),
            "mlm_labels": jnp.where(masked, ids, -100),
            "nsp_labels": jax.random.randint(next(k), (batch,), 0, 2)}


def count_leaves(tree: Any) -> int:
    """Total number of elements in a pytree of arrays or shape structs."""
    return sum(int(x.size) for x in jax.tree_util.tree_leaves(tree))


def make_state(case: Case, dtype: Any, input_size: int | None, seed: int, device: jax.Device,
               global_batch: int) -> State:
    """Parameters (float32) and optimizer state on this process's device, the same on every process for a
    seed; fp16 adds dynamic loss scaling."""
    module = build_module(case, dtype)
    with jax.default_device(device):
        k_params, k_dropout, k_state = jax.random.split(jax.random.PRNGKey(seed), 3)
        variables = module.lazy_init({"params": k_params, "dropout": k_dropout}, *_example(case, 1, input_size),
                                     train=True)
        scale = DynamicScale() if dtype == jnp.float16 else None
        return State.create(apply_fn=module.apply, params=variables["params"], tx=make_optimizer(case, global_batch),
                            batch_stats=variables.get("batch_stats", {}), key=k_state, dynamic_scale=scale)


def make_trainer(case: Case, dtype: Any, batch_size: int, input_size: int | None, seed: int,
                 device: jax.Device, global_batch: int | None = None, placement: Placement | None = None,
                 rank: int = 0) -> JaxTrainer:
    """A trainer on one fixed synthetic batch: this process's rows (seeded by seed + rank) of the global batch,
    the state replicated on the placement's mesh (default: the device alone)."""
    where = placement or Placement.over([device])
    state = where.replicate(make_state(case, dtype, input_size, seed, device, global_batch or batch_size))
    with jax.default_device(device):
        batch = where.shard(synthetic_batch(case, batch_size, input_size, seed + rank))
    return JaxTrainer(state, batch, make_train_step(case, where), device)


class JaxBackend(Backend):
    """How JAX/Flax trains a case. JAX always compiles the step with XLA (jax.jit)."""

    name = "jax"

    def __init__(self) -> None:
        self.facts: dict[str, object] = {}  # what build() chose, recorded by finish()

    def environment(self, spec: PointSpec) -> dict[str, str]:
        threads = _limit_threads(spec.threads)
        if distributed.refuse(spec) is None:  # the worker asks this first: join before any backend starts
            distributed.join(spec)
        env = {"framework_version": jax.__version__, "jaxlib": importlib.metadata.version("jaxlib"),
               "flax": importlib.metadata.version("flax"), "optax": importlib.metadata.version("optax"),
               "jax_platform": jax.default_backend(), "xla_cpu_threads": str(threads)}
        if spec.device == "cuda" and jax.default_backend() == "gpu":
            env["device_model"] = jax.devices("gpu")[0].device_kind
        env.update(distributed.facts(spec))
        return env

    def refuse(self, spec: PointSpec) -> str | None:
        if spec.channels_last:
            return "JAX/XLA chooses layouts itself: --channels-last has no JAX equivalent"
        reason = distributed.refuse(spec)
        if reason:
            return reason
        if spec.device == "cuda" and not any(d.platform == "gpu" for d in jax.devices()):
            return "jax here has no GPU backend (a CPU jaxlib, or no GPU): use --device cpu"
        return None

    def build(self, spec: PointSpec, case: Case) -> Trainer:
        _limit_threads(spec.threads)
        distributed.join(spec)  # already done by environment() in the worker
        device = jax.local_devices(backend=_platform(spec))[0]
        if distributed.strategy(spec) != "none":
            self.facts = {"strategy": distributed.strategy(spec), "jax_processes": jax.process_count()}
            if device.platform == "cpu":
                self.facts["cpu_collectives"] = distributed.CPU_COLLECTIVES
        where, dtype = distributed.placement(spec, device), _dtype(spec, device.platform)
        if spec.data == "real":  # files made by `dlbench data` (docs/data-layout.md), through Grain
            from dlbench.backends.jax import real_data

            state = where.replicate(make_state(case, dtype, spec.input_size, spec.seed, device, spec.global_batch))
            return real_data.build_trainer(spec, case, state, make_train_step(case, where), where, device)
        return make_trainer(case, dtype, spec.batch_size, spec.input_size, spec.seed, device, spec.global_batch,
                            where, jax.process_index())

    def count_params(self, case: Case) -> int:
        module = build_module(case)
        keys = {"params": jax.random.PRNGKey(0), "dropout": jax.random.PRNGKey(1)}
        shapes = jax.eval_shape(lambda k, *xs: module.init(k, *xs, train=True), keys, *_example(case, 1, None))
        return count_leaves(shapes["params"])  # batch_stats are not trainable

    def is_oom(self, exc: BaseException) -> bool:
        return isinstance(exc, MemoryError) or "RESOURCE_EXHAUSTED" in str(exc)

    def finish(self) -> dict[str, object]:
        return {"compiled": "jit (always)", **self.facts}
