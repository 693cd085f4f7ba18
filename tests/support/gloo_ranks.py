"""Run a function on several forked CPU ranks (gloo) and collect what each returns: the multi-rank tests of a split
model (face's classifier, GPT's layouts) start their ranks this way. Each rank runs one thread (the ranks share
this machine's cores) and hands its answer back as pickled bytes (plain copies, not tensors shared through the
manager's file descriptors)."""

from __future__ import annotations

import pickle
import socket
from collections.abc import Callable
from typing import Any


def _main(target: Callable[..., Any], rank: int, port: int, args: tuple[Any, ...], out: Any) -> None:
    import torch

    torch.set_num_threads(1)
    out[rank] = pickle.dumps(target(rank, port, *args))  # bytes: tensors copied, not shared through the manager


def run_ranks(target: Callable[..., Any], world: int, *args: Any, timeout_s: float = 180) -> dict[int, Any]:
    """`target(rank, port, *args)` (a module-level function) in `world` processes, each joining 127.0.0.1:port
    with one thread; {rank: its return}. Every rank must exit cleanly."""
    import torch.multiprocessing

    mp = torch.multiprocessing.get_context("fork")
    with mp.Manager() as manager, socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        out = manager.dict()
        procs = [mp.Process(target=_main, args=(target, r, port, args, out)) for r in range(world)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout_s)
        codes = [p.exitcode for p in procs]
        for p in procs:
            if p.exitcode is None:
                p.kill()
        assert codes == [0] * world
        return {rank: pickle.loads(data) for rank, data in out.items()}


def join_ranks(rank: int, port: int, world: int) -> Any:
    """Inside a rank started by run_ranks: the environment torch.distributed reads (127.0.0.1:port) and the
    RankContext a backend builds with."""
    import os

    from dlbench.wire import RankContext

    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank)
    )
    return RankContext(rank=rank, world_size=world, local_rank=rank, local_world_size=world, rdzv_timeout_s=60)


def token_batch(vocab: int, seq: int, n: int, seed: int = 7) -> dict[str, Any]:
    """A causal-LM batch of n random sequences (inputs and next-token labels), the same for every rank."""
    import torch

    ids = torch.randint(0, vocab, (n, seq + 1), generator=torch.Generator().manual_seed(seed))
    return {"input_ids": ids[:, :-1].contiguous(), "labels": ids[:, 1:].contiguous()}


def step_losses(trainer: Any, batch: dict[str, Any], steps: int) -> list[float]:
    """The loss of each of `steps` train steps on the same batch."""
    out = []
    for _ in range(steps):
        trainer.train_step(batch)
        out.append(trainer.loss())
    return out
