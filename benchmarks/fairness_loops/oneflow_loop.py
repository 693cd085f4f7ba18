"""A bare OneFlow loop, as OneFlow's own examples train (Oneflow-Inc/models, Vision/classification/image/resnet50):
torchvision's ResNet-50 written in oneflow.nn (flowvision, OneFlow's model zoo, does not install beside oneflow
0.9), SGD with momentum 0.9, eager (zero_grad, backward, step) or with --compile an oneflow.nn.Graph of the whole
step with its optimizer added (the examples' graph mode); on one synthetic batch; no dlbench import. Threads:
oneflow.set_num_threads(OMP_NUM_THREADS), as dlbench's backend sets them. fp32 on the CPU only."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import oneflow as flow
from oneflow import nn

sys.path.insert(0, str(Path(__file__).parent))
from common import measure, parse_args


class Bottleneck(nn.Module):
    """torchvision's Bottleneck (v1.5: the stride on the 3x3)."""

    def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or inplanes != planes * 4:
            self.downsample = nn.Sequential(
                nn.Conv2d(inplanes, planes * 4, 1, stride=stride, bias=False), nn.BatchNorm2d(planes * 4)
            )

    def forward(self, x: flow.Tensor) -> flow.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.relu(self.bn3(self.conv3(out)) + identity)


def resnet50(num_classes: int = 1000) -> nn.Module:
    """torchvision's ResNet-50: 7x7 stem, max-pool, stages of 3, 4, 6, 3 bottlenecks, global pool, fc."""
    layers: list[nn.Module] = [
        nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(3, stride=2, padding=1),
    ]
    inplanes = 64
    for i, blocks in enumerate((3, 4, 6, 3)):
        planes = 64 * 2**i
        for j in range(blocks):
            layers.append(Bottleneck(inplanes, planes, 2 if i > 0 and j == 0 else 1))
            inplanes = planes * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, num_classes)]
    return nn.Sequential(*layers)


class TrainGraph(nn.Graph):
    """The whole train step as a graph: forward, loss, backward and the optimizer (OneFlow's graph training)."""

    def __init__(self, model: nn.Module, loss_fn: nn.Module, optimizer: flow.optim.Optimizer) -> None:
        super().__init__()
        self.model, self.loss_fn = model, loss_fn
        self.add_optimizer(optimizer)

    def build(self, images: flow.Tensor, labels: flow.Tensor) -> flow.Tensor:
        loss = self.loss_fn(self.model(images), labels)
        loss.backward()
        return loss


def main() -> None:
    """Train the ResNet-50 the way OneFlow's examples do."""
    args = parse_args(__doc__)
    if args.device != "cpu" or args.precision != "fp32":
        raise SystemExit("the OneFlow loop measures fp32 on the CPU only")
    flow.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1") or 1))
    model = resnet50()
    model.train()
    optimizer = flow.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    images = flow.randn(args.batch_size, 3, args.input_size, args.input_size)
    labels = flow.randint(0, 1000, (args.batch_size,))
    graph = TrainGraph(model, loss_fn, optimizer) if args.compile else None

    def step() -> None:
        if graph is not None:
            graph(images, labels)
            return
        optimizer.zero_grad()
        loss_fn(model(images), labels).backward()
        optimizer.step()

    def sync() -> None:  # OneFlow's eager ops run on its virtual machine: wait for every queued one
        flow._oneflow_internal.eager.Sync()

    measure(step, sync, args, "torchvision's ResNet-50 in oneflow.nn" + (", nn.Graph" if args.compile else ", eager"))


if __name__ == "__main__":
    main()
