"""MXNet's kvstores as gradient strategies: one process, the model's parameters on N contexts (``mx.cpu(i)`` on
the CPU, ``mx.gpu(i)`` on GPUs), each context its own batch, and Gluon's Trainer exchanging through a kvstore:

- ``ps-cpu``: kvstore ``local``: gradients summed on the CPU, where the update runs, and pulled back;
- ``ps-gpu``: kvstore ``device``: gradients summed on the devices (each key on one), the update there;
- ``replicated-nccl``: kvstore ``nccl`` (GPUs only; refused on the CPU);
- ``independent``: no kvstore: every context updates its own copy with its own gradients;
- ``ps``: kvstore ``dist_sync`` across processes: one worker process per device, and a scheduler and a
  server process the launcher starts beside them (spec.servers); the server sums every worker's gradients and
  updates, the workers pull the parameters back (ps-lite over TCP).

On the CPU the contexts share one memory and the same cores: ``local`` and ``device`` then differ only in which
engine queues run the sums, not in any copy across a bus.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

from dlbench.backends.base import AllocatorPeak, Trainer, fixed
from dlbench.backends.mxnet.data import Batch, synthetic_batch
from dlbench.cases import Case
from dlbench.spec import PointSpec
from dlbench.wire import RankContext

KVSTORE: dict[str, str | None] = {
    "ps-cpu": "local",
    "ps-gpu": "device",
    "replicated-nccl": "nccl",
    "independent": None,
    "ps": "dist_sync",
}
STRATEGIES: tuple[str, ...] = tuple(KVSTORE)
SERVER_ROLES: tuple[str, ...] = ("scheduler", "server")  # by ctx.server: the launcher starts spec.servers of them


def refuse(spec: PointSpec, gpus: int) -> str | None:
    """What only this MXNet can tell about the spec's kvstore, one line or None: a distributed kvstore in its build,
    the GPUs one process drives (what the spec alone shows is refused from the capability table: dlbench.refusals)."""
    if spec.strategy == "ps" and not mx.runtime.Features().is_enabled("DIST_KVSTORE"):
        return "this mxnet build has no distributed kvstore (DIST_KVSTORE off): ps (dist_sync) cannot start"
    if spec.strategy in KVSTORE and spec.strategy != "ps" and spec.device == "cuda" and gpus < spec.devices_per_node:
        return f"{spec.strategy} at {spec.scale} needs {spec.devices_per_node} GPUs in one process; it sees {gpus}"
    return None


def dist_env(spec: PointSpec, ctx: RankContext, role: str) -> None:
    """ps-lite's variables for a dist_sync process, from the rank contract: the scheduler listens on
    MASTER_ADDR:MASTER_PORT; one server; a worker per device. Set before the kvstore is made."""
    os.environ.update(
        DMLC_ROLE=role,
        DMLC_PS_ROOT_URI=ctx.master_addr,
        DMLC_PS_ROOT_PORT=str(ctx.master_port),
        DMLC_NUM_SERVER=str(spec.servers - 1),
        DMLC_NUM_WORKER=str(spec.world_size),
    )


def serve(spec: PointSpec, ctx: RankContext, results: list[Path], poll_s: float = 0.5) -> None:
    """Be the point's scheduler (server 0) or server (1) until every worker has written its result: a worker
    refused before it joined would otherwise leave this process waiting for it."""
    dist_env(spec, ctx, SERVER_ROLES[ctx.server])
    threading.Thread(target=_run_server, daemon=True).start()
    while not all(p.exists() for p in results):
        time.sleep(poll_s)


def _run_server() -> None:
    """What ``import mxnet`` does in a process started as a server or scheduler (kvstore_server's module
    init): join ps-lite, then serve until the workers finish. Here mxnet was imported before the role was set."""
    from mxnet.kvstore.kvstore_server import KVStoreServer

    KVStoreServer(mx.kv.create("dist")).run()


def contexts(spec: PointSpec) -> list[mx.Context]:
    """One context per device of the point."""
    make = mx.gpu if spec.device == "cuda" else mx.cpu
    return [make(i) for i in range(spec.devices_per_node)]


def make_trainer(case: Case, net: gluon.Block, global_batch: int, strategy: str) -> gluon.Trainer:
    """A Gluon Trainer with the case's optimizer (lr from Optimizer.lr_for), exchanging through the kvstore."""
    o = case.optimizer
    lr = o.lr_for(global_batch)
    params = {"learning_rate": lr, "wd": o.weight_decay, **({"momentum": o.momentum} if o.name == "sgd" else {})}
    return gluon.Trainer(net.collect_params(), o.name, params, kvstore=KVSTORE[strategy])


def replica_batches(spec: PointSpec, case: Case, ctxs: list[mx.Context]) -> list[Batch]:
    """Each context's fixed synthetic batch, seeded spec.seed + i (context 0: the 1-device batch)."""
    return [synthetic_batch(case, spec.batch_size, c, spec.input_size, spec.seed + i) for i, c in enumerate(ctxs)]


class KvstoreTrainer(Trainer):
    """The loss block's parameters on every context; each context's batch recorded, backward, then one Trainer
    step: the kvstore sums the N contexts' gradients (of batch means), rescaled by 1/N to the global batch's."""

    def __init__(
        self,
        case: Case,
        net: gluon.HybridBlock,
        ctxs: list[mx.Context],
        batches: list[Batch],
        global_batch: int,
        strategy: str,
        workers: int = 1,
    ) -> None:
        super().__init__(fixed(batches))
        self.net, self.ctxs, self.strategy = net, ctxs, strategy
        self.trainer = make_trainer(case, net, global_batch, strategy)
        # the kvstore sums every context's (and with dist_sync every worker's) gradients of batch means
        self.scale = 1 if strategy == "independent" else len(ctxs) * workers
        self._last: list[mx.nd.NDArray] = []

    def train_step(self, batch: list[Batch]) -> None:
        with autograd.record():
            losses = [self.net(*b) for b in batch]
        autograd.backward(losses)
        self.trainer.step(self.scale)  # gradients / N: the mean over the global batch
        self._last = losses

    def sync(self) -> None:
        mx.nd.waitall()

    def loss(self) -> float:
        if not self._last:
            return float("nan")
        return float(np.mean([float(x.astype("float32").asscalar()) for x in self._last]))

    def replica_checksums(self) -> list[float]:
        """One position-weighted float64 sum of the trainable parameters per context."""
        params = [p for p in self.net.collect_params().values() if p.grad_req != "null"]
        return [
            float(sum((i + 1) * np.sum(p.data(c).asnumpy(), dtype=np.float64) for i, p in enumerate(params)))
            for c in self.ctxs
        ]

    def param_checksum(self) -> float:
        """This worker's (first context's) checksum: dist_sync's workers are compared across ranks."""
        return self.replica_checksums()[0]

    def facts(self) -> dict[str, object]:
        """The kvstore the Trainer made, read back, and where it updates."""
        kv = self.trainer._kvstore  # created at the first step
        if kv is not None and kv.type.startswith("dist"):
            return {
                "kvstore": kv.type,
                "update_on_kvstore": bool(self.trainer._update_on_kvstore),
                "workers": kv.num_workers,
                "servers": 1,
                "communication": "ps-lite over TCP to one server "
                "process, which sums the workers' gradients and updates (synchronous)",
            }
        return {
            "kvstore": kv.type if kv is not None else "none (no exchange)",
            "update_on_kvstore": bool(self.trainer._update_on_kvstore) if kv is not None else False,
            "contexts": ",".join(str(c) for c in self.ctxs),
        }

    def allocator_peak(self) -> AllocatorPeak | None:
        """None: MXNet 1.9's pooled allocator exposes no peak."""
        return None
