"""A bare PaddlePaddle loop: paddle.vision.models.resnet50 (random weights), Momentum 0.9, eager, on one synthetic
batch; no dlbench import."""

from __future__ import annotations

import sys
from pathlib import Path

import paddle

sys.path.insert(0, str(Path(__file__).parent))
from common import measure, parse_args  # noqa: E402


def main() -> None:
    """Train paddle.vision's ResNet-50 the way paddle's own examples do (eager mode)."""
    args = parse_args(__doc__)
    paddle.set_device("gpu" if args.device == "cuda" else "cpu")
    model = paddle.vision.models.resnet50()
    model.train()
    opt = paddle.optimizer.Momentum(learning_rate=0.1, momentum=0.9, parameters=model.parameters())
    images = paddle.randn([args.batch_size, 3, args.input_size, args.input_size])
    labels = paddle.randint(0, 1000, [args.batch_size, 1])
    loss_fn = paddle.nn.CrossEntropyLoss()
    amp = args.precision in ("amp", "bf16")
    scaler = paddle.amp.GradScaler() if args.precision == "amp" else None

    def step() -> None:
        with paddle.amp.auto_cast(enable=amp, dtype="float16" if args.precision == "amp" else "bfloat16"):
            loss = loss_fn(model(images), labels)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.minimize(opt, loss)
        else:
            loss.backward()
            opt.step()
        opt.clear_grad()

    measure(step, paddle.device.synchronize if args.device == "cuda" else lambda: None, args,
            "paddle.vision.models.resnet50 (eager)")


if __name__ == "__main__":
    main()
