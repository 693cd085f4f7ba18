"""PowerSGD on gloo, as dlbench registers it (backends/torch/hooks.py), where torch's own hook loses the order of
its collectives: a model of many small buckets, so that several buckets' reductions are in flight at once.

`python powersgd_probe_torch.py ROUNDS` starts 2 gloo ranks; each trains ROUNDS fresh DDP models (a point each:
new model, new hook, 4 steps, compressed from the third) and prints one JSON line: the rounds every rank finished
and each round's parameter checksums (equal across ranks when the exchange is whole). A rank whose collectives
met another's out of order hangs or dies: the caller's timeout says so.
"""

from __future__ import annotations

import json
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

from dlbench.backends.torch import hooks

WORLD, LAYERS, WIDTH, STEPS = 2, 12, 128, 4


def rank_main(rank: int, port: int, rounds: int, out: dict[int, list[float]]) -> None:
    """One rank: ROUNDS fresh points, each with the powersgd hook on buckets of about one layer each."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    torch.set_num_threads(1)
    sums, kept = [], []  # every round's model kept: freeing one joins gloo's threads (strategy_probe_torch.leave)
    for r in range(rounds):
        torch.manual_seed(r)
        model = torch.nn.Sequential(*(torch.nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)))
        ddp = DistributedDataParallel(model, bucket_cap_mb=WIDTH * WIDTH * 4 / 2**20, gradient_as_bucket_view=True)
        hooks.register("powersgd", ddp, torch.device("cpu"))
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
        for step in range(STEPS):
            x = torch.randn(4, WIDTH, generator=torch.Generator().manual_seed(1000 * r + 10 * step + rank))
            ddp(x).square().mean().backward()
            opt.step()
            opt.zero_grad()
        sums.append(float(sum(p.double().sum() for p in model.parameters())))
        kept.append(ddp)
    out[rank] = sums
    dist.destroy_process_group()
    sys.stderr.flush()
    os._exit(0)  # no teardown: a DDP model freed at exit can deadlock on the GIL with gloo's worker thread


def main() -> None:
    """Spawn the ranks and print what they finished."""
    rounds = int(sys.argv[1])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = mp.Manager().dict()
    mp.spawn(rank_main, args=(port, rounds, out), nprocs=WORLD)
    print(json.dumps({"rounds": [len(out[r]) for r in range(WORLD)], "checksums": [out[r] for r in range(WORLD)]}))


if __name__ == "__main__":
    main()
