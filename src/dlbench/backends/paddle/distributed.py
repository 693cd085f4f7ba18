"""paddle.distributed for dlbench: the launcher's rank variables in PaddlePaddle's names, fleet's collective
data parallelism, and a bound on the rendezvous.

The worker reads the launcher's rank variables once into a RankContext (dlbench.wire: rank, world size, local
rank, master address and port, rendezvous timeout, node hosts). Paddle 3.3.1 reads other names:

- PADDLE_TRAINER_ID, PADDLE_TRAINERS_NUM: rank and world size (init_parallel_env, fleet's role maker);
- PADDLE_MASTER: where rank 0 hosts the TCPStore every process group meets through (read by the C++ core,
  which falls back to the first of PADDLE_TRAINER_ENDPOINTS);
- PADDLE_TRAINER_ENDPOINTS, PADDLE_CURRENT_ENDPOINT: one host:port per rank; init_parallel_env insists on
  them, but its process-group path binds none of those ports (gloo exchanges addresses through the store);
- PADDLE_DISTRI_BACKEND: ``gloo`` on the CPU (a CPU build refuses to start without it), ``nccl`` on GPUs,
  which also read FLAGS_selected_gpus (this rank's GPU: RankContext.device_index). Paddle's core reads
  GLOO_SOCKET_IFNAME (the interface gloo uses across hosts; not tried across hosts here).

Two strategies. ``fleet``: ``fleet.init(is_collective=True)`` joins the job and builds its data-parallel
topology; ``fleet.distributed_model`` wraps the loss layer in ``paddle.DataParallel`` (rank 0's parameters
broadcast at construction, gradients averaged by all-reduce during the backward pass); the optimizer is
``fleet.distributed_optimizer``'s. ``none`` with several devices means ``fleet``. ``sharding``: the same calls
with fleet's hybrid topology set to ``sharding_degree`` = the world size (``DistributedStrategy.hybrid_configs``):
``fleet.distributed_model`` is then ``ShardingParallel`` (parameters broadcast from rank 0) and the optimizer is
``HybridParallelOptimizer`` over ``DygraphShardingOptimizer`` (ZeRO stage 1: each rank keeps the optimizer state
of its share of the parameters; each gradient is averaged by a reduce onto the rank that owns it, which updates
the parameter and broadcasts it). BatchNorm running statistics stay per rank (neither broadcasts them), so the
checksum covers trainable parameters only.

Fleet's tensor and pipeline parallel do not run on the CPU: their layers and schedules call the process group's
``*_on_calc_stream`` collectives (``all_reduce_on_calc_stream`` in ``ColumnParallelLinear``, ``RowParallelLinear``
and ``VocabParallelEmbedding``; ``send_on_calc_stream``/``recv_on_calc_stream`` in ``PipelineParallel``), which
``ProcessGroupGLOO`` does not implement (Paddle 3.3.1); ``cases/llama_layout.py`` refuses them (docs/llm.md).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager

import numpy as np
import paddle
from paddle.distributed import fleet

from dlbench.backends.base import strategy_run
from dlbench.spec import PointSpec
from dlbench.wire import RDZV_TIMEOUT_VAR, RankContext

STRATEGIES: tuple[str, ...] = ("fleet", "sharding")


def strategy(spec: PointSpec) -> str:
    """The strategy this point runs: 'none' alone, else the spec's, with 'none' meaning 'fleet'."""
    return strategy_run(spec, "fleet")


def comm_backend(spec: PointSpec) -> str:
    """The collective library: gloo on the CPU, NCCL on GPUs."""
    return "nccl" if spec.device == "cuda" else "gloo"


def paddle_env(spec: PointSpec, ctx: RankContext, gpu: int = 0) -> dict[str, str]:
    """Paddle's variables for this rank, from its RankContext (rank r runs on node r // devices_per_node); gpu is
    this rank's GPU ordinal among the visible ones."""
    hosts = list(ctx.node_hosts) or [ctx.master_addr]
    # Distinct placeholders per rank; the process-group path never binds them (see the module docstring).
    endpoints = [
        f"{hosts[min(r // spec.devices_per_node, len(hosts) - 1)]}:{ctx.master_port + 1 + r}"
        for r in range(ctx.world_size)
    ]
    out = {
        "PADDLE_TRAINER_ID": str(ctx.rank),
        "PADDLE_TRAINERS_NUM": str(ctx.world_size),
        "PADDLE_MASTER": f"{ctx.master_addr}:{ctx.master_port}",
        "PADDLE_TRAINER_ENDPOINTS": ",".join(endpoints),
        "PADDLE_CURRENT_ENDPOINT": endpoints[ctx.rank],
        "PADDLE_RANK_IN_NODE": str(ctx.local_rank),
        "PADDLE_DISTRI_BACKEND": comm_backend(spec),
    }
    if spec.device == "cuda":
        out["FLAGS_selected_gpus"] = str(gpu)
    return out


# The watchdog: a separate interpreter, because paddle's C++ rendezvous holds the GIL while it waits (a Python
# thread or signal handler in this process never runs then). It exits quietly once this process is gone.
_WATCHDOG = """
import os, signal, sys, time
pid, seconds, message = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
end = time.monotonic() + seconds
while time.monotonic() < end:
    time.sleep(0.2)
    if os.getppid() != pid:
        sys.exit(0)
print(message, file=sys.stderr, flush=True)
os.kill(pid, signal.SIGKILL)
"""


@contextmanager
def deadline(seconds: float, what: str) -> Iterator[None]:
    """SIGKILL this process, after one line on stderr, if the block has not finished within `seconds`.

    Paddle's global TCPStore is created by its C++ core with a fixed wait that no variable or argument reaches
    (it retries the connection every 3 s meanwhile), and nothing in this process can interrupt that wait. The
    launcher kills the group at the point's timeout too, but DLBENCH_RDZV_TIMEOUT should end a missing peer's wait
    sooner.
    """
    message = f"paddle rendezvous: {what} within {seconds:g} s ({RDZV_TIMEOUT_VAR})"
    watchdog = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", _WATCHDOG, str(os.getpid()), str(seconds), message],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
    )
    try:
        yield
    finally:
        watchdog.kill()
        watchdog.wait()


def join(spec: PointSpec, ctx: RankContext, gpu: int = 0, environ: MutableMapping[str, str] = os.environ) -> None:
    """Join the job from the rank context (several devices only): fleet.init, bounded by ctx.rdzv_timeout_s."""
    if strategy(spec) == "none" or joined():
        return
    environ.update(paddle_env(spec, ctx, gpu))
    what = f"rank {ctx.rank} did not meet its {spec.world_size - 1} peer(s) at {ctx.master_addr}:{ctx.master_port}"
    with deadline(ctx.rdzv_timeout_s, what):
        fleet.init(is_collective=True, strategy=hybrid_strategy(spec))
        paddle.distributed.barrier()  # every rank's process group is up before the first timed collective
    if paddle.distributed.get_world_size() != spec.world_size:
        raise RuntimeError(
            f"the launcher started {paddle.distributed.get_world_size()} ranks; the spec asks for {spec.world_size}"
        )


def hybrid_strategy(spec: PointSpec) -> fleet.DistributedStrategy | None:
    """fleet's DistributedStrategy for the point: ``sharding`` sets every rank in one sharding group (ZeRO stage 1);
    ``fleet`` keeps fleet's default (data parallel over every rank)."""
    if strategy(spec) != "sharding":
        return None
    hybrid = fleet.DistributedStrategy()
    hybrid.hybrid_configs = {"dp_degree": 1, "mp_degree": 1, "pp_degree": 1, "sharding_degree": spec.world_size}
    return hybrid


def joined() -> bool:
    """Whether this process is part of a job of several ranks."""
    return bool(paddle.distributed.is_initialized()) and paddle.distributed.get_world_size() > 1


def rank() -> int:
    """This process's rank (0 outside a job)."""
    return paddle.distributed.get_rank() if joined() else 0


def data_parallel(layer: paddle.nn.Layer) -> paddle.nn.Layer:
    """The loss layer as fleet's data-parallel model in a job (paddle.DataParallel), else unchanged."""
    return fleet.distributed_model(layer) if joined() else layer


def distributed_optimizer(optimizer: paddle.optimizer.Optimizer) -> paddle.optimizer.Optimizer:
    """fleet's optimizer for the job (HybridParallelOptimizer), else the optimizer unchanged."""
    return fleet.distributed_optimizer(optimizer) if joined() else optimizer


def distributed_scaler(scaler: paddle.amp.GradScaler) -> paddle.amp.GradScaler:
    """fleet's loss scaler for the job (infinite gradients agreed on by every rank), else unchanged."""
    return fleet.distributed_scaler(scaler) if joined() else scaler


def facts(
    spec: PointSpec, wrapped: paddle.nn.Layer | None = None, optimizer: paddle.optimizer.Optimizer | None = None
) -> dict[str, str]:
    """What the job ran with (several devices only): strategy, collectives, world size, the wrappers used."""
    if strategy(spec) == "none":
        return {}
    out = {
        "strategy_run": strategy(spec),
        "dist_backend": comm_backend(spec),
        "paddle_world_size": str(paddle.distributed.get_world_size() if joined() else spec.world_size),
    }
    if wrapped is not None:
        out["paddle_parallel"] = f"fleet.distributed_model -> {type(wrapped).__name__}"
    if optimizer is not None:
        inner = getattr(optimizer, "_inner_opt", None)
        out["paddle_optimizer"] = " -> ".join(type(o).__name__ for o in (optimizer, inner) if o is not None)
        shares = getattr(inner, "_rank2params", None)  # DygraphShardingOptimizer: which rank updates which tensors
        if isinstance(shares, dict):
            counts = [len(shares[r]) for r in sorted(shares)]
            out["paddle_sharded_params"] = f"parameter tensors updated (optimizer state kept) per rank: {counts}"
    return out


def param_checksum(model: paddle.nn.Layer) -> float:
    """A position-weighted float64 sum of every trainable parameter: equal on ranks holding the same ones."""
    total = 0.0
    trainable = [p for p in model.parameters() if not p.stop_gradient]
    for i, p in enumerate(trainable):
        total += (i + 1) * float(np.asarray(p.numpy(), dtype=np.float64).sum())
    return total
