"""A bare MegEngine loop, as MegEngine's own examples train (MegEngine/Models, official/vision/classification/
resnet): torchvision's ResNet-50 written in megengine.module (the Models repo is not in the wheel), SGD with
momentum 0.9 under a GradManager, ``optimizer.step().clear_grad()``, eager or with --compile the whole step under
megengine.jit.trace(symbolic=True); on one synthetic batch; no dlbench import. Threads: the ``multithreadN:0`` CPU
device with N = OMP_NUM_THREADS, as dlbench's backend chooses it. fp32 on the CPU only."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import megengine as mge
import megengine.functional as F
import megengine.module as M
import numpy as np
from megengine import optimizer as optim
from megengine.autodiff import GradManager
from megengine.jit import trace

sys.path.insert(0, str(Path(__file__).parent))
from common import measure, parse_args


class Bottleneck(M.Module):
    """torchvision's Bottleneck (v1.5: the stride on the 3x3), as MegEngine's official ResNet writes it."""

    def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = M.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = M.BatchNorm2d(planes)
        self.conv2 = M.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = M.BatchNorm2d(planes)
        self.conv3 = M.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = M.BatchNorm2d(planes * 4)
        self.downsample = None
        if stride != 1 or inplanes != planes * 4:
            self.downsample = M.Sequential(
                M.Conv2d(inplanes, planes * 4, 1, stride=stride, bias=False), M.BatchNorm2d(planes * 4)
            )

    def forward(self, x: mge.Tensor) -> mge.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        return F.relu(self.bn3(self.conv3(out)) + identity)


class ResNet50(M.Module):
    """torchvision's ResNet-50: 7x7 stem, max-pool, stages of 3, 4, 6, 3 bottlenecks, global pool, fc."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = M.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = M.BatchNorm2d(64)
        self.maxpool = M.MaxPool2d(3, stride=2, padding=1)
        blocks, inplanes = [], 64
        for i, count in enumerate((3, 4, 6, 3)):
            planes = 64 * 2**i
            for j in range(count):
                blocks.append(Bottleneck(inplanes, planes, 2 if i > 0 and j == 0 else 1))
                inplanes = planes * 4
        self.layers = M.Sequential(*blocks)
        self.fc = M.Linear(2048, num_classes)

    def forward(self, x: mge.Tensor) -> mge.Tensor:
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        x = F.flatten(F.adaptive_avg_pool2d(self.layers(x), 1), 1)
        return self.fc(x)


def main() -> None:
    """Train the ResNet-50 the way MegEngine's examples do."""
    args = parse_args(__doc__)
    if args.device != "cpu" or args.precision != "fp32":
        raise SystemExit("the MegEngine loop measures fp32 on the CPU only")
    threads = int(os.environ.get("OMP_NUM_THREADS", "1") or 1)
    mge.set_default_device(f"multithread{threads}:0" if threads > 1 else "cpu0")
    model = ResNet50()
    model.train()
    gm = GradManager().attach(model.parameters())
    optimizer = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    rng = np.random.default_rng(0)
    images = mge.tensor(rng.standard_normal((args.batch_size, 3, args.input_size, args.input_size), np.float32))
    labels = mge.tensor(rng.integers(0, 1000, args.batch_size).astype(np.int32))

    def train_step(data: mge.Tensor, label: mge.Tensor) -> mge.Tensor:
        with gm:
            loss = F.nn.cross_entropy(model(data), label)
            gm.backward(loss)
        optimizer.step().clear_grad()
        return loss

    run = trace(train_step, symbolic=True, symbolic_shape=False) if args.compile else train_step
    measure(
        lambda: run(images, labels),
        mge._full_sync,
        args,
        "torchvision's ResNet-50 in megengine.module" + (", jit.trace(symbolic)" if args.compile else ", eager"),
    )


if __name__ == "__main__":
    main()
