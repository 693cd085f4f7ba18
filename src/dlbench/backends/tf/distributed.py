"""tf.distribute for dlbench: which strategy a point runs, TF_CONFIG from the rank contract, and the trainer.

The launcher (local with several devices, hosts, mpirun, Slurm) starts the workers with the rank contract
(dlbench.wire), which the worker reads into its `RankContext`. From it each worker writes TF_CONFIG, worker i
listening on ``{host of i}:{master_port + 1 + i}``, before TF's context starts.

- ``multiworker`` (and ``none`` with several devices, as torch's ``none`` means its usual data parallelism):
  ``MultiWorkerMirroredStrategy``, one replica per process, gradients all-reduced (RING on the CPU, NCCL on GPUs);
- ``mirrored``: ``MirroredStrategy``, ONE process driving the node's N GPUs (``--scale 1nNc``, a single-process
  strategy: spec.processes is 1), each replica taking the spec's per-device batch; stored as 1nNc;
- ``ps``: ``ParameterServerStrategy`` across processes, asynchronous (parameter_server.py);
- ``ps-cpu``, ``ps-gpu``, ``replicated-nccl``, ``replicated-copy``, ``replicated-pscpu``, ``independent``:
  tf_cnn_benchmarks' variable managers, one process over N devices (variables.py); on the CPU the devices are
  N logical CPU devices (plus one for the host), which share the same cores.
"""

from __future__ import annotations

import json
import os

import keras
import numpy as np
import tensorflow as tf

from dlbench.backends.base import AllocatorPeak, Trainer, fixed
from dlbench.backends.tf import variables
from dlbench.backends.tf.data import synthetic_batch
from dlbench.backends.tf.models import train_loss
from dlbench.backends.tf.step import gpu_peak, make_optimizer
from dlbench.cases import Case
from dlbench.spec import PointSpec
from dlbench.wire import NODE_HOSTS_VAR, RankContext

STRATEGIES: tuple[str, ...] = ("multiworker", "mirrored")
# Gradients all-reduced in packs of up to 32 MiB rather than one collective per tensor (TF's default, 0): on
# the 2-core test machine ResNet-50 steps took 1.9-2.3 s with packs and 3.2-3.7 s without.
BYTES_PER_PACK = 32 * 1024 * 1024
# Ring collectives block inter-op threads while they wait for peers; with one such thread (--threads 1) the
# same steps took 8-9 s instead of ~2 s with 4.
MIN_INTER_OP_THREADS = 4
STRATEGY_CLASS = {"multiworker": "MultiWorkerMirroredStrategy", "mirrored": "MirroredStrategy"}


def strategy_name(spec: PointSpec) -> str:
    """The strategy this point runs: 'none' alone, 'multiworker' for 'none' with several devices, else the spec's."""
    if spec.strategy == "none":
        return "multiworker" if spec.world_size > 1 else "none"
    return spec.strategy


def inter_op_threads(spec: PointSpec, threads: int) -> int:
    """TF's inter-op pool size: the thread count, raised to MIN_INTER_OP_THREADS when collectives run."""
    return max(threads, MIN_INTER_OP_THREADS) if strategy_name(spec) != "none" else threads


def drives_all(spec: PointSpec) -> bool:
    """Whether this one process drives every device of the point (mirrored, the variable managers)."""
    return spec.processes == 1 and spec.world_size > 1


def refuse(spec: PointSpec, local_gpus: int) -> str | None:
    """What only this process can tell about the spec's strategy, one line or None: whether it sees the GPUs the
    strategy drives (what the spec alone shows is refused from the capability table: dlbench.refusals)."""
    if spec.device != "cuda" or spec.world_size == 1:
        return None
    chosen = strategy_name(spec)
    if chosen in variables.STRATEGIES and local_gpus < spec.devices_per_node:
        return f"{chosen} at {spec.scale} needs {spec.devices_per_node} GPUs in one process; it sees {local_gpus}"
    if chosen == "mirrored" and local_gpus < max(2, spec.devices_per_node):
        return (
            f"mirrored needs at least 2 local GPUs, --scale 1nNc (N GPUs of this node) and --device cuda; "
            f"this process sees {local_gpus} GPU(s)"
        )
    if chosen == "multiworker" and local_gpus < spec.devices_per_node:
        return f"{spec.scale} needs {spec.devices_per_node} GPUs per node; this node has {local_gpus}"
    return None


def tf_config(spec: PointSpec, ctx: RankContext) -> dict[str, object]:
    """TF_CONFIG for this rank from its context: every worker named by host and port, this one's index."""
    if not ctx.master_port:
        raise RuntimeError("MASTER_PORT is not set: start several-device points through a dlbench launcher")
    hosts = list(ctx.node_hosts)
    if not hosts and spec.nodes == 1:
        hosts = [ctx.master_addr or "127.0.0.1"]
    if len(hosts) < spec.nodes:
        raise RuntimeError(f"{NODE_HOSTS_VAR} names {len(hosts)} node host(s); the spec has {spec.nodes} nodes")
    workers = [f"{hosts[i // spec.devices_per_node]}:{ctx.master_port + 1 + i}" for i in range(spec.world_size)]
    return {"cluster": {"worker": workers}, "task": {"type": "worker", "index": ctx.rank}}


def _bound_registration(spec: PointSpec, seconds: float) -> None:
    """Make the start-up wait for every worker give up after `seconds` (TF's default: an hour), with a
    DeadlineExceededError. MultiWorkerMirroredStrategy configures the coordination service itself only where
    none is configured, and no public API takes this timeout: so configure it as the strategy would, plus the
    timeout (measured: a worker alone raised after 6 s with 5 s; without the barrier flag it waited on)."""
    from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2
    from tensorflow.python.eager import context

    ctx = context.context()
    ctx.configure_coordination_service(
        service_type="standalone",
        service_leader="/job:worker/replica:0/task:0",
        cluster_register_timeout_in_ms=int(seconds * 1000),
        coordinated_jobs=[coordination_config_pb2.CoordinatedJob(name="worker", num_tasks=spec.world_size)],
    )
    ctx.coordination_service.cluster_register_with_barrier = True


def make_strategy(spec: PointSpec, ctx: RankContext) -> tf.distribute.Strategy | None:
    """The point's tf.distribute strategy (None alone); for multiworker, writes TF_CONFIG first. Call this
    before anything starts TF's context: collective ops can only be configured at program start."""
    chosen = strategy_name(spec)
    if chosen == "mirrored":  # the first devices_per_node visible GPUs, one replica each
        return tf.distribute.MirroredStrategy([f"/GPU:{i}" for i in range(spec.devices_per_node)])
    if chosen != "multiworker":
        return None
    os.environ["TF_CONFIG"] = json.dumps(tf_config(spec, ctx))
    # Neither the start-up wait for every worker nor a collective waits for a missing peer longer than the
    # rendezvous timeout. TF runs a watchdog thread per collective for the latter; with gradients packed there
    # are only a few collectives per step.
    timeout = ctx.rdzv_timeout_s
    _bound_registration(spec, timeout)
    impl = (
        tf.distribute.experimental.CommunicationImplementation.NCCL
        if spec.device == "cuda"
        else tf.distribute.experimental.CommunicationImplementation.RING
    )
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=impl, bytes_per_pack=BYTES_PER_PACK, timeout_seconds=timeout
    )
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)


def facts(spec: PointSpec, strategy: tf.distribute.Strategy) -> dict[str, object]:
    """What the point ran on: strategy class, communication, workers and replicas (for the result's extra)."""
    chosen = strategy_name(spec)
    if chosen == "multiworker":
        communication = "nccl" if spec.device == "cuda" else "ring"
    else:  # the cross-device op MirroredStrategy chose, read back (NCCL where it can, else ReductionToOneDevice)
        ops = getattr(strategy.extended, "_cross_device_ops", None) or strategy.extended._get_cross_device_ops(None)
        communication = type(ops).__name__
    out: dict[str, object] = {
        "tf_strategy": STRATEGY_CLASS[chosen],
        "communication": communication,
        "workers": spec.world_size if chosen == "multiworker" else 1,
        "replicas": int(strategy.num_replicas_in_sync),
        "per_replica_batch": spec.global_batch // int(strategy.num_replicas_in_sync),
    }
    if chosen == "multiworker":
        out["bytes_per_pack"] = BYTES_PER_PACK
    if spec.compile:
        out["xla_scope"] = "forward and backward; the all-reduce and the update run outside XLA"
    return out


class TfDistTrainer(Trainer):
    """One replica's batch per local device; ``train_step`` runs the replica step under ``strategy.run``
    (gradients all-reduced as a sum of losses each divided by the replica count) and reduces the loss to its
    mean. The input is one fixed distributed batch (synthetic data only: refuse() turns real data away)."""

    def __init__(
        self,
        spec: PointSpec,
        case: Case,
        strategy: tf.distribute.Strategy,
        model: keras.Model,
        loss_scale: bool,
        ctx: RankContext,
    ) -> None:
        self.case, self.model, self.strategy = case, model, strategy
        self.replicas = int(strategy.num_replicas_in_sync)
        devices = list(strategy.extended.worker_devices)
        per_replica = spec.global_batch // self.replicas
        first = ctx.rank * len(devices) if strategy_name(spec) == "multiworker" else 0
        batches = [
            synthetic_batch(case, per_replica, d, spec.input_size, spec.seed + first + i) for i, d in enumerate(devices)
        ]  # each replica its own samples; replica 0: the 1-device batch
        super().__init__(
            fixed(
                strategy.experimental_distribute_values_from_function(
                    lambda rctx: batches[rctx.replica_id_in_sync_group - first]
                )
            )
        )
        with strategy.scope():
            self.optimizer = make_optimizer(case, spec.global_batch, loss_scale)
            self.optimizer.build(model.trainable_variables)  # slots exist, mirrored, before tracing
        # XLA cannot compile the cross-replica all-reduce (CollectiveReduceV2): with --compile only the forward
        # and backward pass are XLA-compiled
        self._grads = tf.function(self._loss_and_grads, jit_compile=True) if spec.compile else self._loss_and_grads
        self._step = tf.function(self._train_step, autograph=False)
        self._device = devices[0]
        self._several_workers = strategy_name(spec) == "multiworker"  # else one process (mirrored)
        self._last: tf.Tensor | None = None
        self._host: float | None = None

    def _loss_and_grads(self, batch: dict[str, tf.Tensor]) -> tuple[tf.Tensor, list[tf.Tensor]]:
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            loss = train_loss(self.case, self.model, batch)
            scaled = self.optimizer.scale_loss(loss / self.replicas)  # the optimizer sums replicas' gradients
        return loss, tape.gradient(scaled, variables)

    def _replica_step(self, batch: dict[str, tf.Tensor]) -> tf.Tensor:
        loss, grads = self._grads(batch)
        self.optimizer.apply(grads, self.model.trainable_variables)  # all-reduce and update, outside XLA
        return loss

    def _train_step(self, batch: dict[str, tf.Tensor]) -> tf.Tensor:
        per_replica = self.strategy.run(self._replica_step, args=(batch,))
        return self.strategy.reduce(tf.distribute.ReduceOp.MEAN, per_replica, axis=None)

    def train_step(self, batch: object) -> None:
        self._last = self._step(batch)
        self._host = None

    def sync(self) -> None:
        """Fetch the reduced loss, then one parameter, to the host: on a GPU the variable updates are queued
        after the loss on the same stream, so reading a parameter waits for the whole step. (Not
        tf.test.experimental.sync_devices: it would also run on every other worker's devices.)"""
        if self._last is not None:
            self._host = float(self._last.numpy())
        keras.ops.convert_to_numpy(self.model.trainable_variables[-1])

    def loss(self) -> float:
        if self._host is None:
            self.sync()
        return self._host if self._host is not None else float("nan")

    def agree_steps(self, steps: int) -> int:
        """Worker 0's step count on every worker: the sum over the replicas of (steps on replica 0, worker 0's
        first, and 0 on the others), reduced by the strategy's own collective; as is in one process (mirrored)."""
        if not self._several_workers:
            return steps

        def contribution() -> tf.Tensor:
            first = tf.distribute.get_replica_context().replica_id_in_sync_group == 0
            return tf.where(first, tf.constant(steps, tf.int64), tf.constant(0, tf.int64))

        per_replica = self.strategy.run(tf.function(contribution))
        return int(self.strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None).numpy())

    def param_checksum(self) -> float:
        """A position-weighted float64 sum of every trainable weight: equal on workers holding the same weights."""
        return float(
            sum(
                (i + 1) * np.sum(keras.ops.convert_to_numpy(v), dtype=np.float64)
                for i, v in enumerate(self.model.trainable_variables)
            )
        )

    def replica_checksums(self) -> list[float]:
        """mirrored: one param_checksum per replica's copy of every mirrored variable (this process holds them
        all); multiworker: this worker's own (its ranks are compared by the controller)."""
        per_var = [getattr(v.value, "values", (v.value,)) for v in self.model.trainable_variables]
        return [
            float(
                sum(
                    (i + 1) * np.sum(keras.ops.convert_to_numpy(vals[r]), dtype=np.float64)
                    for i, vals in enumerate(per_var)
                )
            )
            for r in range(len(per_var[0]))
        ]

    def allocator_peak(self) -> AllocatorPeak | None:
        """The allocator peak of the first replica's GPU (every replica holds the same model and batch size)."""
        return gpu_peak(self._device)
