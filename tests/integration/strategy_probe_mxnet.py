"""Run in the MXNet environment: MXNet's kvstores over N CPU contexts in one process (backends/mxnet/kvstores.py)
against one context, on the same global batch.

`python strategy_probe_mxnet.py DEVICES STEPS` prints one JSON line: one context's loss after each of STEPS steps;
for every strategy the losses, each context's checksum and the kvstore Gluon made; and the refusal of the nccl
kvstore on the CPU. The model is a tiny VGG (no batch norm, no dropout) with a learning rate that moves the loss.
"""

from __future__ import annotations

import dataclasses
import json
import sys


def main(devices: int, steps: int) -> dict[str, object]:
    """Every kvstore's losses beside one context's."""
    import mxnet as mx

    from dlbench.backends.mxnet import kvstores
    from dlbench.backends.mxnet.data import synthetic_batch
    from dlbench.backends.mxnet.models import TrainLoss, build_model, initialize
    from dlbench.cases import ImageInput, Optimizer, get_case
    from dlbench.cases.arch import POOL, VggArch
    from dlbench.spec import PointSpec, Protocol

    case = dataclasses.replace(get_case("vgg16"), arch=VggArch((8, POOL, 16, POOL), pool=2, fc=(32,), dropout=0.0),
                               input=ImageInput(size=16, classes=10), optimizer=Optimizer("sgd", lr=0.05, momentum=0.9))
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
        slices = [[a[i * per:(i + 1) * per].as_in_context(c) for a in whole] for i, c in enumerate(ctxs)]
        trainer = kvstores.KvstoreTrainer(case, net_on(ctxs), ctxs, slices, per * devices, strategy)
        answer[strategy] = {"losses": run(trainer), "checksums": trainer.replica_checksums(), **trainer.facts()}
    spec = PointSpec(framework="mxnet", model="resnet50", batch_size=2, protocol=Protocol(0, 1, 1, "median"),
                     devices_per_node=devices, strategy="replicated-nccl")
    answer["nccl_refusal"] = kvstores.refuse(spec, gpus=0)
    return answer


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]), int(sys.argv[2]))))
