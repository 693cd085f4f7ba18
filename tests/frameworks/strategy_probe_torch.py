"""torch's multi-process strategies (backends/torch/distributed.py and hooks.py) on 2 gloo ranks against one
device, on the same global batch.

`python strategy_probe_torch.py STEPS STRATEGY...` prints one JSON line: one device's loss after each of STEPS
steps, and for every strategy the global batch's mean loss (the ranks' losses averaged) after each step and
each rank's parameter checksum. The model is a tiny VGG (no batch norm, no dropout) with a learning rate large
enough for the steps to move the loss, so that a wrong exchange shows.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from dlbench.backends.base import fixed
from dlbench.backends.torch import distributed
from dlbench.backends.torch.models import build_model
from dlbench.backends.torch.step import TorchTrainer
from dlbench.cases import Case, ImageInput, Optimizer, get_case
from dlbench.cases.arch import POOL, VggArch
from dlbench.data.synthetic import synthetic_images
from dlbench.numerics import resolve_precision
from dlbench.spec import PointSpec, Protocol
from dlbench.wire import RankContext

WORLD, PER_RANK, SIZE = 2, 2, 16


def tiny_case() -> Case:
    """VGG's builder at a toy size, without dropout, with SGD at a learning rate that moves the loss."""
    return dataclasses.replace(
        get_case("vgg16"),
        arch=VggArch((8, POOL, 16, POOL), pool=2, fc=(32,), dropout=0.0),
        input=ImageInput(size=SIZE, classes=10),
        optimizer=Optimizer("sgd", lr=0.05, momentum=0.9),
    )


def whole_batch(case: Case) -> dict[str, torch.Tensor]:
    """The global batch: every rank takes its slice, one device the whole."""
    a = synthetic_images(case.input, PER_RANK * WORLD, SIZE, 0)  # type: ignore[arg-type]
    return {"images": torch.from_numpy(a["images"]), "labels": torch.from_numpy(a["labels"]).long()}


def trainer(case: Case, spec: PointSpec, batch: dict[str, torch.Tensor], ctx: RankContext) -> TorchTrainer:
    """The backend's own wrapping for the strategy, then its trainer on a fixed batch."""
    torch.manual_seed(0)
    model, sync, _ = distributed.setup(spec, build_model(case), torch.device("cpu"), ctx)
    return TorchTrainer(
        case,
        model,
        fixed(batch),
        torch.device("cpu"),
        resolve_precision("fp32", "cpu"),
        False,
        spec.global_batch,
        sync=sync,
    )


def rank(r: int, strategies: list[str], steps: int, ports: list[int], out: dict[str, object]) -> None:
    """One rank: every strategy in turn, each in a process group of its own."""
    case = tiny_case()
    whole = whole_batch(case)
    mine = {k: v[r * PER_RANK : (r + 1) * PER_RANK] for k, v in whole.items()}
    ctx = RankContext(rank=r, world_size=WORLD, local_rank=r, local_world_size=WORLD, rdzv_timeout_s=120)
    kept = []  # every strategy's trainer, never destroyed: see leave()
    for strategy, port in zip(strategies, ports):
        os.environ.update(RANK=str(r), WORLD_SIZE=str(WORLD), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        spec = PointSpec(
            framework="torch",
            model="vgg16",
            batch_size=PER_RANK,
            protocol=Protocol(0, steps, 1, "median"),
            devices_per_node=WORLD,
            strategy=strategy,
        )
        t = trainer(case, spec, mine, ctx)
        losses = []
        for _ in range(steps):
            t.train_step(t.next_batch())
            mean = torch.tensor(t.loss())
            dist.all_reduce(mean)
            losses.append(float(mean) / WORLD)
        out[f"{strategy}/{r}"] = {"losses": losses, "checksum": t.param_checksum()}
        kept.append(t)
        dist.destroy_process_group()
        print(f"rank {r}: {strategy} done", file=sys.stderr, flush=True)  # a hang names the strategy it was in
    leave()


def leave() -> None:
    """End the rank without Python's teardown. A DDP model freed at exit destroys its gloo process group, whose
    destructor joins gloo's worker thread while holding the GIL; a worker still releasing a finished collective's
    tensors waits for the GIL: both wait forever (a rank hung at exit after every strategy was done, 1 run in 3
    under load). The results are already with the parent (the manager's dict); nothing else is left to do."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def free_port() -> int:
    """A free TCP port on the loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main(steps: int, strategies: list[str]) -> dict[str, object]:
    """One device's losses, then every strategy's on 2 ranks."""
    case = tiny_case()
    one = PointSpec(
        framework="torch", model="vgg16", batch_size=PER_RANK * WORLD, protocol=Protocol(0, steps, 1, "median")
    )
    t = trainer(case, one, whole_batch(case), RankContext())
    single = []
    for _ in range(steps):
        t.train_step(t.next_batch())
        single.append(t.loss())
    manager = mp.Manager()
    out = manager.dict()
    ports = [free_port() for _ in strategies]
    # spawn, not fork: a rank forked from a parent that has already trained can inherit a lock held by one of
    # its threads and hang (CI once waited 600 s here; the same probe takes 9 s)
    mp.start_processes(rank, args=(strategies, steps, ports, out), nprocs=WORLD, start_method="spawn")
    answer: dict[str, object] = {"one_device": single}
    for s in strategies:
        answer[s] = {
            "losses": out[f"{s}/0"]["losses"],
            "checksums": [out[f"{s}/{r}"]["checksum"] for r in range(WORLD)],
        }
    return answer


if __name__ == "__main__":
    torch.set_num_threads(1)
    print(json.dumps(main(int(sys.argv[1]), sys.argv[2:])))
