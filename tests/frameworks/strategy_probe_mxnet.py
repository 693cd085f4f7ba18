"""Run in the MXNet environment: MXNet's kvstores over N CPU contexts in one process (backends/mxnet/kvstores.py)
against one context, on the same global batch.

`python strategy_probe_mxnet.py DEVICES STEPS` prints one JSON line: one context's loss after each of STEPS steps;
for every strategy the losses, each context's checksum and the kvstore Gluon made; and the refusal of the nccl
kvstore on the CPU. `... dist DEVICES STEPS`: the same for dist_sync (ps), its scheduler, server and workers as
processes of their own. The model is a tiny VGG (no batch norm, no dropout) with a learning rate that moves the loss.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
from pathlib import Path


def main(devices: int, steps: int) -> dict[str, object]:
    """Every kvstore's losses beside one context's."""
    import mxnet as mx

    from dlbench.backends.mxnet import kvstores
    from dlbench.backends.mxnet.data import synthetic_batch
    from dlbench.backends.mxnet.models import TrainLoss, build_model, initialize
    from dlbench.cases import ImageInput, Optimizer, get_case
    from dlbench.cases.arch import POOL, VggArch
    from dlbench.refusals import refusal
    from dlbench.spec import PointSpec, Protocol

    case = dataclasses.replace(
        get_case("vgg16"),
        arch=VggArch((8, POOL, 16, POOL), pool=2, fc=(32,), dropout=0.0),
        input=ImageInput(size=16, classes=10),
        optimizer=Optimizer("sgd", lr=0.05, momentum=0.9),
    )
    per, size, ctxs = 2, 16, [mx.cpu(i) for i in range(devices)]
    whole = synthetic_batch(case, per * devices, mx.cpu(0), size, seed=0)

    def net_on(where: list[mx.Context]) -> TrainLoss:
        mx.random.seed(0)
        net = TrainLoss(case, build_model(case, size))
        initialize(net, where)
        return net

    def run(trainer: kvstores.KvstoreTrainer) -> list[float]:
        out = []
        for _ in range(steps):
            trainer.train_step(trainer.next_batch())
            out.append(trainer.loss())
        return out

    one = kvstores.KvstoreTrainer(case, net_on([mx.cpu(0)]), [mx.cpu(0)], [whole], per * devices, "independent")
    answer: dict[str, object] = {"one_device": run(one)}
    for strategy in ("ps-cpu", "ps-gpu", "independent"):
        slices = [[a[i * per : (i + 1) * per].as_in_context(c) for a in whole] for i, c in enumerate(ctxs)]
        trainer = kvstores.KvstoreTrainer(case, net_on(ctxs), ctxs, slices, per * devices, strategy)
        answer[strategy] = {"losses": run(trainer), "checksums": trainer.replica_checksums(), **trainer.facts()}
    spec = PointSpec(
        framework="mxnet",
        model="resnet50",
        batch_size=2,
        protocol=Protocol(0, 1, 1, "median"),
        devices_per_node=devices,
        strategy="replicated-nccl",
    )
    answer["nccl_refusal"] = refusal(spec)  # the capability table's (dlbench.refusals), as the worker asks first
    return answer


def dist_worker(role: str, rank: int, devices: int, steps: int, port: int, done: Path) -> dict[str, object]:
    """One process of a dist_sync point (ps): the scheduler or the server serve; worker `rank` trains its slice
    of the global batch through the backend's trainer and reports its losses and checksum."""
    import mxnet as mx

    from dlbench.backends.mxnet import kvstores
    from dlbench.backends.mxnet.data import synthetic_batch
    from dlbench.backends.mxnet.models import TrainLoss, build_model, initialize
    from dlbench.cases import ImageInput, Optimizer, get_case
    from dlbench.cases.arch import POOL, VggArch
    from dlbench.spec import PointSpec, Protocol
    from dlbench.wire import RankContext

    spec = PointSpec(
        framework="mxnet",
        model="vgg16",
        batch_size=2,
        protocol=Protocol(0, steps, 1, "median"),
        devices_per_node=devices,
        strategy="ps",
    )
    ctx = RankContext(rank=rank, world_size=devices, master_port=port, server=rank if role != "worker" else -1)
    if role != "worker":
        kvstores.serve(spec, ctx, [done])  # until main has the workers' answers
        return {}
    kvstores.dist_env(spec, ctx, "worker")
    case = dataclasses.replace(
        get_case("vgg16"),
        arch=VggArch((8, POOL, 16, POOL), pool=2, fc=(32,), dropout=0.0),
        input=ImageInput(size=16, classes=10),
        optimizer=Optimizer("sgd", lr=0.05, momentum=0.9),
    )
    whole = synthetic_batch(case, 2 * devices, mx.cpu(), 16, seed=0)
    mx.random.seed(0)
    net = TrainLoss(case, build_model(case, 16))
    initialize(net, mx.cpu())
    mine = [[a[rank * 2 : (rank + 1) * 2] for a in whole]]
    trainer = kvstores.KvstoreTrainer(case, net, [mx.cpu()], mine, 2 * devices, "ps", workers=devices)
    losses = []
    for _ in range(steps):
        trainer.train_step(trainer.next_batch())
        losses.append(trainer.loss())
    return {"losses": losses, "checksum": trainer.param_checksum(), **trainer.facts()}


def dist(devices: int, steps: int) -> dict[str, object]:
    """A dist_sync point's processes (scheduler, server, workers) on this machine; the workers' global loss
    (their losses averaged) and checksums."""
    import socket
    import subprocess

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    done = Path(tempfile.mkdtemp()) / "done"
    me = [sys.executable, __file__, "dist-process"]
    servers = [
        subprocess.Popen([*me, role, str(i), str(devices), str(steps), str(port), str(done)])
        for i, role in enumerate(("scheduler", "server"))
    ]
    workers = [
        subprocess.Popen(
            [*me, "worker", str(r), str(devices), str(steps), str(port), str(done)], stdout=subprocess.PIPE, text=True
        )
        for r in range(devices)
    ]
    try:
        outs = [json.loads(w.communicate(timeout=300)[0].strip().splitlines()[-1]) for w in workers]
    finally:
        done.touch()
        for p in [*servers, *workers]:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
    return {
        "losses": [sum(o["losses"][i] for o in outs) / devices for i in range(steps)],
        "checksums": [o["checksum"] for o in outs],
        "kvstore": outs[0]["kvstore"],
    }


if __name__ == "__main__":
    if sys.argv[1] == "dist-process":
        role, rank, devices, steps, port = sys.argv[2], *map(int, sys.argv[3:7])
        print(json.dumps(dist_worker(role, rank, devices, steps, port, Path(sys.argv[7]))))
    elif sys.argv[1] == "dist":
        print(json.dumps(dist(int(sys.argv[2]), int(sys.argv[3]))))
    else:
        print(json.dumps(main(int(sys.argv[1]), int(sys.argv[2]))))
