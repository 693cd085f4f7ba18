"""The smallest input each case's architecture takes, from its own table. Framework-free.

An image model is refused an input side below its total down-sampling (ResNet's stem, max-pool and three strided
stages: 32; VGG's five pools: 32): below it a strided layer only sees padding, so the point trains a different
network from the one named. A side whose layers would see a map smaller than their window (AlexNet below 63,
Inception v3 below 75, as torchvision documents) is refused too; cases/flops.py walks those shapes. BERT needs
two tokens (one to mask besides [CLS]); a decoder one.
"""

from __future__ import annotations

import math

from dlbench.cases import Case
from dlbench.cases.arch import POOL, AlexNetArch, Arch, BertConfig, FaceArch, InceptionArch, ResNetArch, VggArch
from dlbench.spec import SpecError

_SEARCH_LIMIT = 4096  # an architecture that takes nothing below this has no usable input


def downsampling(arch: Arch) -> int:
    """How many times smaller the last feature map is than the input, along one side (1: not an image model)."""
    if isinstance(arch, FaceArch):
        arch = arch.backbone
    if isinstance(arch, ResNetArch):
        return 4 * 2 ** (len(arch.stages) - 1)  # the stem's stride 2, its max-pool's 2, a stride 2 per later stage
    if isinstance(arch, VggArch):
        return 2 ** sum(v == POOL for v in arch.layers)
    if isinstance(arch, AlexNetArch):
        return math.prod(c.stride for c in arch.convs) * 2 ** sum(c.pool_after for c in arch.convs)
    if isinstance(arch, InceptionArch):
        return 32  # torchvision's Inception3: five stride-2 layers
    return 1


def min_input_size(case: Case) -> int:
    """The smallest --input-size the case takes: at least its down-sampling, and every layer's window must fit."""
    if isinstance(case.arch, BertConfig):
        return 2
    least = downsampling(case.arch)
    if least == 1:
        return 1
    for side in range(least, _SEARCH_LIMIT):
        try:
            case.train_flops_per_sample(side)  # walks every layer's shape; too small a map is a SpecError
            return side
        except SpecError:
            continue
    return _SEARCH_LIMIT


__all__ = ["downsampling", "min_input_size"]
