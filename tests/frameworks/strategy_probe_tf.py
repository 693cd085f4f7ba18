"""Run in the TF environment: TF's variable managers (backends/tf/variables.py) on logical CPU devices against one
device, on the same global batch, in one process.

`python strategy_probe_tf.py DEVICES STEPS` prints one JSON line: for one device and every strategy, the loss
after each of STEPS steps, the replica checksums and where variables and gradient sums were placed; and TF's
refusal of replicated-nccl on the CPU, and mirrored's replica checksums. The model is a tiny VGG (no batch norm,
no dropout) with a learning rate that moves the loss, so that N replicas on N slices of a batch compute exactly
the gradient of one device on the whole batch.
"""

from __future__ import annotations

import dataclasses
import json
import sys


def main(devices: int, steps: int) -> dict[str, object]:
    """Every strategy's losses beside one device's."""
    import keras
    import tensorflow as tf

    from dlbench.backends.base import fixed
    from dlbench.backends.tf import distributed, variables
    from dlbench.backends.tf.data import synthetic_batch
    from dlbench.backends.tf.models import build_model
    from dlbench.backends.tf.step import TfTrainer
    from dlbench.cases import ImageInput, Optimizer, get_case
    from dlbench.cases.arch import POOL, VggArch
    from dlbench.refusals import refusal
    from dlbench.spec import PointSpec, Protocol
    from dlbench.wire import RankContext

    variables.split_cpu(devices + 1)
    case = dataclasses.replace(
        get_case("vgg16"),
        arch=VggArch((8, POOL, 16, POOL), pool=2, fc=(32,), dropout=0.0),
        input=ImageInput(size=16, classes=10),
        optimizer=Optimizer("sgd", lr=0.05, momentum=0.9),
    )
    per_device, size = 2, 16
    whole = synthetic_batch(case, per_device * devices, "/CPU:0", size, seed=0)
    place = variables.logical_cpus(devices)

    def run(trainer: object) -> list[float]:
        out = []
        for _ in range(steps):
            trainer.train_step(trainer.next_batch())  # type: ignore[attr-defined]
            out.append(trainer.loss())  # type: ignore[attr-defined]
        return out

    keras.utils.set_random_seed(0)
    single = TfTrainer(
        case,
        build_model(case, size),
        fixed(whole),
        "/CPU:0",
        jit_compile=False,
        loss_scale=False,
        global_batch=per_device * devices,
    )
    answer: dict[str, object] = {"one_device": run(single)}
    for strategy in variables.STRATEGIES:
        if strategy == "replicated-nccl":
            continue
        keras.utils.set_random_seed(0)
        model = variables.build_placed(strategy, place, lambda: build_model(case, size))
        slices = []
        for i, d in enumerate(place.compute):
            with tf.device(d):
                slices.append({k: tf.identity(v[i * per_device : (i + 1) * per_device]) for k, v in whole.items()})
        trainer = variables.VariableMgrTrainer(case, model, strategy, place, slices, per_device * devices)
        answer[strategy] = {
            "losses": run(trainer),
            "checksums": trainer.replica_checksums(),
            "variables_on": trainer.placement(),
            "sums_on": trainer.summed_on(),
        }
    spec = PointSpec(
        framework="tf",
        model="resnet50",
        batch_size=2,
        protocol=Protocol(0, 1, 1, "median"),
        devices_per_node=devices,
        strategy="replicated-nccl",
    )
    # mirrored's own check, on the logical CPUs dlbench refuses it on (the swap TF makes there is read back)
    mirrored = tf.distribute.MirroredStrategy(list(place.compute))
    with mirrored.scope():
        model = build_model(case, size)
    mspec = dataclasses.replace(spec, model="vgg16", input_size=size, strategy="mirrored")
    trainer = distributed.TfDistTrainer(mspec, case, mirrored, model, False, RankContext())
    answer["mirrored"] = {
        "losses": run(trainer),
        "checksums": trainer.replica_checksums(),
        "communication": distributed.facts(mspec, mirrored)["communication"],
    }
    answer["nccl_refusal"] = refusal(spec)  # the capability table's (dlbench.refusals), as the worker asks first
    return answer


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]), int(sys.argv[2]))))
