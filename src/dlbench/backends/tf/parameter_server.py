"""TF's ParameterServerStrategy as ``ps`` across processes: one coordinator (the point's only worker process, rank
0, which measures), and beside it the servers the launcher starts (spec.servers): one TF worker server per device
and one ps task, each a ``tf.distribute.Server`` until the coordinator has written its result.

Training is ASYNCHRONOUS: the coordinator schedules step functions (``ClusterCoordinator.schedule``) to whichever
worker is free; each worker reads the variables from the ps task, computes its batch's gradients and applies
them there, without waiting for the others. One protocol step schedules one closure per device and waits for all
(``join``), so a step trains the global batch, but no two workers' gradients are ever summed: the point says so.
Keras 3's ``fit`` does not support this strategy; this is a custom loop over the same Keras model.

TF_CONFIG comes from the rank contract: the coordinator ("chief") at MASTER_ADDR:MASTER_PORT+1, worker i at
MASTER_PORT+2+i, the ps task at MASTER_PORT+2+N (every process on node 0's host).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from dlbench.backends.base import Trainer, fixed
from dlbench.backends.tf.data import synthetic_batch
from dlbench.backends.tf.models import train_loss
from dlbench.backends.tf.step import make_optimizer
from dlbench.cases import Case
from dlbench.spec import PointSpec
from dlbench.wire import RankContext

SYNCHRONIZATION = (
    "asynchronous: each worker applies its own batch's gradients to the ps variables when it "
    "finishes (ClusterCoordinator), no two workers' gradients are summed"
)


def cluster(spec: PointSpec, ctx: RankContext) -> dict[str, list[str]]:
    """The chief, N workers and one ps task, on node 0's host from MASTER_PORT + 1 on."""
    if not ctx.master_port:
        raise RuntimeError("MASTER_PORT is not set: start a ps point through a dlbench launcher")
    host, port, n = ctx.master_addr or "127.0.0.1", ctx.master_port, spec.world_size
    return {
        "chief": [f"{host}:{port + 1}"],
        "worker": [f"{host}:{port + 2 + i}" for i in range(n)],
        "ps": [f"{host}:{port + 2 + n}"],
    }


def role(spec: PointSpec, ctx: RankContext) -> tuple[str, int]:
    """This process's TF task: the coordinator for a rank, worker i for server i < N, else the ps task."""
    if ctx.server < 0:
        return "chief", 0
    return ("worker", ctx.server) if ctx.server < spec.world_size else ("ps", 0)


def write_tf_config(spec: PointSpec, ctx: RankContext) -> None:
    """TF_CONFIG for this process, before TF's context starts."""
    job, index = role(spec, ctx)
    os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster(spec, ctx), "task": {"type": job, "index": index}})


def serve(spec: PointSpec, ctx: RankContext, results: list[Path], poll_s: float = 0.5) -> None:
    """A worker or ps server of the point until the coordinator has written its result (a worker server on a GPU
    machine keeps only its device's GPU)."""
    write_tf_config(spec, ctx)
    job, index = role(spec, ctx)
    gpus = tf.config.list_physical_devices("GPU")
    if spec.device == "cpu" or job == "ps":
        tf.config.set_visible_devices([], "GPU")
    elif gpus:
        tf.config.set_visible_devices([gpus[index % len(gpus)]], "GPU")
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    tf.distribute.Server(resolver.cluster_spec(), job_name=job, task_index=index, protocol="grpc", start=True)
    while not all(p.exists() for p in results):
        time.sleep(poll_s)


def make_strategy(spec: PointSpec, ctx: RankContext) -> tf.distribute.ParameterServerStrategy:
    """The coordinator's strategy over the servers the launcher started."""
    write_tf_config(spec, ctx)
    return tf.distribute.ParameterServerStrategy(tf.distribute.cluster_resolver.TFConfigClusterResolver())


class PsTrainer(Trainer):
    """The coordinator's loop: each protocol step schedules one closure per device (a batch of the per-device size
    on whichever worker is free) and ``sync`` waits for them all."""

    def __init__(
        self, spec: PointSpec, case: Case, strategy: tf.distribute.ParameterServerStrategy, model: keras.Model
    ) -> None:
        self.case, self.model, self.strategy, self.n = case, model, strategy, spec.world_size
        self.coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
        with strategy.scope():
            self.optimizer = make_optimizer(case, spec.batch_size, loss_scale=False)  # each update: one batch
            self.optimizer.build(model.trainable_variables)

        def dataset() -> tf.data.Dataset:  # the 1-device batch on every worker
            return tf.data.Dataset.from_tensors(
                synthetic_batch(case, spec.batch_size, "/CPU:0", spec.input_size, spec.seed)
            ).repeat()

        super().__init__(fixed(iter(self.coordinator.create_per_worker_dataset(dataset))))
        self._step = tf.function(self._train_step)
        self._pending: list[tf.distribute.experimental.coordinator.RemoteValue] = []
        self._host: float | None = None

    def _train_step(self, iterator: object) -> tf.Tensor:
        def replica(batch: dict[str, tf.Tensor]) -> tf.Tensor:
            with tf.GradientTape() as tape:
                loss = train_loss(self.case, self.model, batch)
            self.optimizer.apply(tape.gradient(loss, self.model.trainable_variables), self.model.trainable_variables)
            return loss

        return self.strategy.run(replica, args=(next(iterator),))  # type: ignore[call-overload]

    def train_step(self, batch: object) -> None:
        self._pending = [self.coordinator.schedule(self._step, args=(batch,)) for _ in range(self.n)]
        self._host = None

    def sync(self) -> None:
        """Wait for every scheduled closure, then fetch their losses (their mean is the step's)."""
        self.coordinator.join()
        if self._pending:
            self._host = float(np.mean([float(v.fetch()) for v in self._pending]))

    def loss(self) -> float:
        if self._host is None:
            self.sync()
        return self._host if self._host is not None else float("nan")

    def replica_checksums(self) -> list[float]:
        """One copy, on the ps task: its checksum (the workers hold none)."""
        return [
            float(
                sum(
                    (i + 1) * np.sum(keras.ops.convert_to_numpy(v), dtype=np.float64)
                    for i, v in enumerate(self.model.trainable_variables)
                )
            )
        ]


def facts(spec: PointSpec) -> dict[str, object]:
    """What a ps point ran."""
    return {
        "tf_strategy": "ParameterServerStrategy (ClusterCoordinator, custom loop)",
        "synchronization": SYNCHRONIZATION,
        "communication": "gRPC between each worker server and the ps task",
        "workers": spec.world_size,
        "ps_tasks": 1,
        "coordinator": "rank 0 (schedules, measures; computes nothing)",
    }
