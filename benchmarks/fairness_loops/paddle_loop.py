"""A bare PaddlePaddle loop: paddle.vision.models.resnet50 (random weights), Momentum 0.9, on one synthetic batch;
no dlbench import. The settings dlbench applies for the point come from fairness.py: the flags (TF32 switches
and Paddle's own benchmark flags on a GPU), the layout (NHWC: the layers switched as Paddle's NHWC layers are
built) and the AMP level (O2: paddle.amp.decorate with master weights); --compile is paddle.jit.to_static with
its default converter."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import paddle
from paddle.nn.functional.conv import _update_padding_nd

sys.path.insert(0, str(Path(__file__).parent))
from common import measure, parse_args


def channels_last(model: paddle.nn.Layer) -> paddle.nn.Layer:
    """Convolutions, batch norms and pools to NHWC in place (paddle.vision builds them NCHW only)."""
    for layer in model.sublayers():
        if isinstance(layer, paddle.nn.Conv2D):
            layer._data_format, layer._channel_dim = "NHWC", 3
            layer._updated_padding, layer._padding_algorithm = _update_padding_nd(layer._padding, True, 2)
        elif isinstance(layer, (paddle.nn.BatchNorm2D, paddle.nn.AdaptiveAvgPool2D)):
            layer._data_format = "NHWC"
        elif isinstance(layer, paddle.nn.MaxPool2D):
            layer.data_format = "NHWC"
    return model


def main() -> None:
    """Train paddle.vision's ResNet-50 the way paddle's own examples do (eager, or to_static with --compile)."""
    args = parse_args(__doc__)
    paddle.set_device("gpu" if args.device == "cuda" else "cpu")
    # paddle's CPU math library runs FLAGS_paddle_num_threads (1) threads whatever OMP_NUM_THREADS says; dlbench
    # sets the point's threads (--threads, else OMP_NUM_THREADS), so the loop does too
    paddle.base.core.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1") or 1))
    if args.flags:
        paddle.set_flags(args.flags)
    model = paddle.vision.models.resnet50()
    model = channels_last(model) if args.layout == "NHWC" else model
    model.train()
    amp = args.precision in ("amp", "bf16")
    dtype = "float16" if args.precision == "amp" else "bfloat16"
    opt = paddle.optimizer.Momentum(
        learning_rate=0.1, momentum=0.9, parameters=model.parameters(), multi_precision=amp and args.amp_level == "O2"
    )
    if amp and args.amp_level == "O2":
        model, opt = paddle.amp.decorate(models=model, optimizers=opt, level="O2", dtype=dtype, master_weight=True)
    forward = paddle.jit.to_static(model) if args.compile else model
    shape = [args.batch_size, 3, args.input_size, args.input_size]
    images = paddle.randn(shape if args.layout == "NCHW" else [shape[0], shape[2], shape[3], shape[1]])
    labels = paddle.randint(0, 1000, [args.batch_size, 1])
    loss_fn = paddle.nn.CrossEntropyLoss()
    scaler = paddle.amp.GradScaler() if args.precision == "amp" else None
    last: list[paddle.Tensor] = []

    def step() -> None:
        with paddle.amp.auto_cast(enable=amp, level=args.amp_level, dtype=dtype):
            loss = loss_fn(forward(images), labels)
        last[:] = [loss]
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.minimize(opt, loss)
        else:
            loss.backward()
            opt.step()
        opt.clear_grad()

    def sync() -> None:  # the GPU's queue; on the CPU, the last loss (a to_static program's output) read
        paddle.device.synchronize() if args.device == "cuda" else last[0].numpy()

    measure(step, sync, args, "paddle.vision.models.resnet50" + (" (to_static)" if args.compile else " (eager)"))


if __name__ == "__main__":
    main()
