"""A bare MindSpore loop, as MindSpore's own tutorials train: ResNet-50 written in mindspore.nn as MindSpore's model
zoo writes it (mindspore/models, official/cv/ResNet: the stride on the 3x3, v1.5; the wheel ships no ResNet-50),
the functional step of its tutorials, ``mindspore.value_and_grad`` then the nn.Momentum optimizer (0.9), in
PyNative mode or with --compile as one ms.jit graph; on one synthetic batch; no dlbench import. Threads: MindSpore
reads OMP_NUM_THREADS (fairness.py sets it, as dlbench's workers get it). fp32 on the CPU only."""

from __future__ import annotations

import sys
from pathlib import Path

import mindspore as ms
import numpy as np
from mindspore import nn, ops

sys.path.insert(0, str(Path(__file__).parent))
from common import measure, parse_args


def _conv(cin: int, cout: int, kernel: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, kernel, stride=stride, pad_mode="pad", padding=kernel // 2, has_bias=False)


class ResidualBlock(nn.Cell):
    """The model zoo's ResidualBlock: 1x1, 3x3 carrying the stride, 1x1 (x4), with a projection where needed."""

    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        mid = cout // 4
        self.conv1, self.bn1 = _conv(cin, mid, 1), nn.BatchNorm2d(mid)
        self.conv2, self.bn2 = _conv(mid, mid, 3, stride), nn.BatchNorm2d(mid)
        self.conv3, self.bn3 = _conv(mid, cout, 1), nn.BatchNorm2d(cout)
        self.relu = nn.ReLU()
        self.down = stride != 1 or cin != cout
        if self.down:
            self.down_sample = nn.SequentialCell([_conv(cin, cout, 1, stride), nn.BatchNorm2d(cout)])

    def construct(self, x: ms.Tensor) -> ms.Tensor:
        identity = self.down_sample(x) if self.down else x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.relu(self.bn3(self.conv3(out)) + identity)


class ResNet50(nn.Cell):
    """7x7 stem, max-pool, stages of 3, 4, 6, 3 residual blocks, global mean, dense."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.conv1, self.bn1, self.relu = _conv(3, 64, 7, 2), nn.BatchNorm2d(64), nn.ReLU()
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, pad_mode="same")
        blocks, cin = [], 64
        for i, count in enumerate((3, 4, 6, 3)):
            cout = 256 * 2**i
            for j in range(count):
                blocks.append(ResidualBlock(cin, cout, 2 if i > 0 and j == 0 else 1))
                cin = cout
        self.layers = nn.SequentialCell(blocks)
        self.mean = ops.ReduceMean(keep_dims=False)
        self.fc = nn.Dense(2048, num_classes)

    def construct(self, x: ms.Tensor) -> ms.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        return self.fc(self.mean(self.layers(x), (2, 3)))


def main() -> None:
    """Train the ResNet-50 the way MindSpore's tutorials do."""
    args = parse_args(__doc__)
    if args.device != "cpu" or args.precision != "fp32":
        raise SystemExit("the MindSpore loop measures fp32 on the CPU only")
    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_device("CPU")
    model = ResNet50()
    model.set_train(True)
    optimizer = nn.Momentum(model.trainable_params(), 0.1, 0.9)
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")

    def forward(data: ms.Tensor, label: ms.Tensor) -> ms.Tensor:
        return loss_fn(model(data), label)

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)

    def train_step(data: ms.Tensor, label: ms.Tensor) -> ms.Tensor:
        loss, grads = grad_fn(data, label)
        optimizer(grads)
        return loss

    run = ms.jit(train_step) if args.compile else train_step
    rng = np.random.default_rng(0)
    images = ms.Tensor(rng.standard_normal((args.batch_size, 3, args.input_size, args.input_size), np.float32))
    labels = ms.Tensor(rng.integers(0, 1000, args.batch_size).astype(np.int32))
    last: list[ms.Tensor] = []

    def step() -> None:
        last[:] = [run(images, labels)]

    def sync() -> None:  # on the CPU, reading the loss and the last updated parameter waits for the step's kernels
        last[0].asnumpy()
        optimizer.parameters[-1].asnumpy()

    measure(
        step, sync, args, "the model zoo's ResNet-50 in mindspore.nn" + (", ms.jit" if args.compile else ", PyNative")
    )


if __name__ == "__main__":
    main()
