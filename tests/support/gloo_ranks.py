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
