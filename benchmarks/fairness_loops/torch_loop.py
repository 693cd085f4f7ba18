"""A bare PyTorch loop over torchvision's ResNet-50 (the torchvision package where installed; else the same
torchvision-style code below), or with --model alexnet torchvision's AlexNet (startup.py's floor), no dlbench
import. The optimizer is torch.optim.SGD built with the keyword
arguments fairness.py passes (dlbench's for the point: lr, momentum, weight decay, and fused on a GPU, so that a
GradScaler step needs no host read on both sides); --compile is torch.compile."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))
from common import measure, parse_args


class Bottleneck(nn.Module):
    """torchvision's Bottleneck (v1.5: the stride on the 3x3 convolution)."""

    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.relu(self.bn3(self.conv3(out)) + identity)


class ResNet50(nn.Module):
    """torchvision.models.resnet50's layout: stem, stages of 3, 4, 6, 3 bottlenecks, pool, 1000-way fc."""

    def __init__(self) -> None:
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layers = nn.Sequential(
            *(self._stage(p, n, s) for p, n, s in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)))
        )
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(2048, 1000)

    def _stage(self, planes: int, blocks: int, stride: int) -> nn.Sequential:
        down = None
        if stride != 1 or self.inplanes != planes * 4:
            down = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * 4, 1, stride, bias=False), nn.BatchNorm2d(planes * 4)
            )
        layers = [Bottleneck(self.inplanes, planes, stride, down)]
        self.inplanes = planes * 4
        layers += [Bottleneck(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(self.avgpool(self.layers(x)), 1))


class AlexNet(nn.Module):
    """torchvision.models.alexnet's layout: five convolutions, a 6x6 adaptive pool, a 3-layer head with dropout."""

    def __init__(self) -> None:
        super().__init__()
        conv = ((3, 64, 11, 4, 2), (64, 192, 5, 1, 2), (192, 384, 3, 1, 1), (384, 256, 3, 1, 1), (256, 256, 3, 1, 1))
        layers: list[nn.Module] = []
        for i, (cin, cout, k, s, p) in enumerate(conv):
            layers += [nn.Conv2d(cin, cout, k, s, p), nn.ReLU(inplace=True)]
            layers += [nn.MaxPool2d(3, 2)] if i in (0, 1, 4) else []
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(6)
        self.classifier = nn.Sequential(
            nn.Dropout(0.5),
            nn.Linear(256 * 36, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(0.5),
            nn.Linear(4096, 4096),
            nn.ReLU(inplace=True),
            nn.Linear(4096, 1000),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def canonical_model(name: str) -> tuple[nn.Module, str]:
    """torchvision's model where the package is installed, else the same torchvision-style code above."""
    try:
        import torchvision.models as zoo

        return getattr(zoo, name)(), f"torchvision.models.{name}"
    except ImportError:
        own = {"resnet50": ResNet50, "alexnet": AlexNet}[name]
        return own(), "torchvision-style code (torchvision not installed)"


def set_tf32(allow: bool) -> None:
    """TF32 for matmuls and cuDNN convolutions on or off, as dlbench sets it: the legacy flags first, then every
    fp32_precision value where torch has that API (2.9+), so that the legacy getters, which Inductor reads, stay
    readable (setting only the new API makes them raise "mix of the legacy and new APIs")."""
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = allow
    if hasattr(torch.backends, "fp32_precision"):
        mode = "tf32" if allow else "ieee"
        torch.backends.fp32_precision = mode
        torch.backends.cuda.matmul.fp32_precision = mode
        torch.backends.cudnn.fp32_precision = mode
        torch.backends.cudnn.conv.fp32_precision = mode
        torch.backends.cudnn.rnn.fp32_precision = mode


def make_optimizer(params: list[torch.nn.Parameter], kwargs: dict[str, object]) -> torch.optim.Optimizer:
    """SGD with the constructor arguments dlbench uses for the point (momentum 0.9 when none are given), its
    momentum buffers zero before the first step: torch's own first step for dampening 0, and fused SGD then has
    no buffer to leave unwritten when a GradScaler skips that step (dlbench primes them the same way)."""
    opt = torch.optim.SGD(params, **{"lr": 0.1, "momentum": 0.9, **kwargs})  # type: ignore[arg-type]
    for group in opt.param_groups:
        if group["momentum"]:
            for p in group["params"]:
                opt.state[p]["momentum_buffer"] = torch.zeros_like(p)
    return opt


def main() -> None:
    """Train torchvision's ResNet-50 (or AlexNet) on one synthetic batch, the way its reference script does."""
    args = parse_args(__doc__, models=("resnet50", "alexnet"))
    set_tf32(args.precision == "tf32")
    torch.backends.cudnn.benchmark = True
    model, canonical = canonical_model(args.model)
    device = torch.device(args.device)
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    model = model.to(device, memory_format=fmt).train()
    opt = make_optimizer(list(model.parameters()), args.optimizer)
    forward = torch.compile(model) if args.compile else model
    images = torch.randn(args.batch_size, 3, args.input_size, args.input_size, device=device).to(memory_format=fmt)
    labels = torch.randint(0, 1000, (args.batch_size,), device=device)
    scaler = torch.amp.GradScaler(args.device, init_scale=args.loss_scale_init, enabled=args.precision == "amp")
    dtype = {"amp": torch.float16, "bf16": torch.bfloat16}.get(args.precision)
    loss_fn = nn.CrossEntropyLoss()

    def step() -> None:
        ctx = torch.autocast(args.device, dtype=dtype) if dtype else contextlib.nullcontext()
        with ctx:
            loss = loss_fn(forward(images), labels)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    measure(step, torch.cuda.synchronize if args.device == "cuda" else lambda: None, args, canonical)


if __name__ == "__main__":
    main()
