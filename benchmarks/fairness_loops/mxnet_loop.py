"""A bare MXNet loop, as MXNet's Gluon image-classification example trains: gluon.model_zoo.vision.resnet50_v1,
autograd.record, backward, a gluon.Trainer with SGD (momentum 0.9) stepping by the batch size, on one synthetic
batch; no dlbench import. The zoo's v1 strides the first 1x1 conv of a down-sampling block; the loop moves that
stride to the 3x3 (ResNet v1.5, the work dlbench's model does: about 5% more than v1), and keeps the zoo's biased
1x1 convs (0.1% of the parameters, nothing of the work). Imperative, or with --compile hybridize(static_alloc,
static_shape), as dlbench's MXNet points; the threads reach MXNet through OMP_NUM_THREADS (fairness.py sets it)."""

from __future__ import annotations

import sys
from pathlib import Path

import mxnet as mx
from mxnet import autograd, gluon
from mxnet.gluon.model_zoo import vision

sys.path.insert(0, str(Path(__file__).parent))
from common import measure, parse_args


def v1_5(net: gluon.HybridBlock) -> gluon.HybridBlock:
    """The zoo's ResNet-50 v1 with each down-sampling block's stride on its 3x3 conv instead of its first 1x1."""
    for stage in net.features:
        for block in stage if isinstance(stage, gluon.nn.HybridSequential) else ():
            first, three = block.body[0]._kwargs, block.body[3]._kwargs
            if first["stride"] != (1, 1):
                first["stride"], three["stride"] = (1, 1), first["stride"]
    return net


def main() -> None:
    """Train the zoo's ResNet-50 (v1.5 strides) the way the Gluon example does."""
    args = parse_args(__doc__)
    if args.device != "cpu" or args.precision != "fp32":
        raise SystemExit("the MXNet loop measures fp32 on the CPU only (as dlbench's MXNet fairness points)")
    ctx = mx.cpu()
    net = v1_5(vision.resnet50_v1())
    net.initialize(mx.init.Xavier(), ctx=ctx)
    if args.compile:
        net.hybridize(static_alloc=True, static_shape=True)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    images = mx.nd.random.normal(shape=(args.batch_size, 3, args.input_size, args.input_size), ctx=ctx)
    labels = mx.nd.random.randint(0, 1000, shape=(args.batch_size,), ctx=ctx).astype("float32")

    def step() -> None:
        with autograd.record():
            loss = loss_fn(net(images), labels)
        loss.backward()
        trainer.step(args.batch_size)

    how = "hybridized" if args.compile else "imperative"
    measure(step, mx.nd.waitall, args, f"gluon.model_zoo.vision.resnet50_v1 (v1.5 strides), {how}, gluon.Trainer")


if __name__ == "__main__":
    main()
