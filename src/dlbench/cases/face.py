"""Face recognition, DLPerf's InsightFace special case (OneFlow's oneflow_face against deepinsight/insightface):
how many identities a classifier can hold, by classifier mode. Framework-free.

InsightFace's recipe (arcface_torch): 112x112 aligned faces, a ResNet-50 backbone, a 512-d embedding, a bias-free
classifier over the identities with ArcFace's additive angular margin (m 0.5, s 64), SGD momentum 0.9, lr 0.1,
weight decay 5e-4, batch 64 per device. DLPerf's table (seed 003) gives the largest number of classes that
trained, with model parallelism and Partial FC, on 1 and 8 V100-16GB: reference data, `DLPERF_MAX_CLASSES`.

The classifier modes, as case parameters:
- full (`model_parallel` 0, `sample` 100): the whole classifier on every device, its gradient all-reduced;
- model parallel (`model_parallel` 1): the classifier split by classes across the ranks, the embeddings (and
  labels) all-gathered, the softmax computed across ranks;
- Partial FC (`model_parallel` 1, `sample` 10): each step each rank uses its positive classes and a random
  sample of the rest, `sample` percent of its classes (An et al., "Partial FC", 2021).

Trainable parameters at C classes: the ResNet-50 backbone without its 1000-class fc (23,508,032), the embedding
Linear 2048 -> 512 with bias (1,049,088), its BatchNorm1d (1,024) and the classifier 512 C:
``24,558,144 + 512 C`` (all ranks together; each rank holds C / ranks of the classifier when model-parallel).
"""

from __future__ import annotations

import dataclasses

from dlbench.cases import Case, CaseParam, ImageInput, Optimizer, register
from dlbench.cases.arch import FaceArch, Loss, ResNetArch
from dlbench.cases.flops import register_forward_flops, resnet_macs
from dlbench.spec import SpecError

# DLPerf's Max num_classes table (seed 003): (nodes, devices per node) -> (OneFlow, MXNet/insightface), batch 64
# per device, FP16, model parallel and Partial FC on, V100-SXM2-16GB.
DLPERF_MAX_CLASSES: dict[tuple[int, int], tuple[int, int]] = {
    (1, 1): (2_000_000, 1_800_000),
    (1, 8): (13_500_000, 12_000_000),
}
# The classifier modes by name -> (model_parallel, sample percent).
MODES: dict[str, tuple[int, int]] = {"full": (0, 100), "model_parallel": (1, 100), "partial_fc": (1, 10)}


def face_arch(case: Case) -> FaceArch:
    """The case's face-recognition architecture (at its configured classes and mode)."""
    if not isinstance(case.arch, FaceArch):
        raise TypeError(f"case {case.name} is not a face-recognition model")
    return case.arch


def backbone_params(a: ResNetArch) -> int:
    """Trainable parameters of a bottleneck ResNet without its classifier: convolutions (no bias) and batch norms."""
    total = 3 * a.width * 49 + 2 * a.width  # the 7x7 stem and its batch norm
    cin = a.width
    for i, blocks in enumerate(a.stages):
        width = a.width * 2**i
        cout = width * a.expansion
        for j in range(blocks):
            total += cin * width + 9 * width * width + width * cout + 2 * (2 * width + cout)
            if (i > 0 and j == 0) or cin != cout:
                total += cin * cout + 2 * cout  # the projection shortcut
            cin = cout
    return total


def features(a: FaceArch) -> int:
    """Width of the backbone's pooled output."""
    return a.backbone.width * 2 ** (len(a.backbone.stages) - 1) * a.backbone.expansion


def param_count(a: FaceArch) -> int:
    """Trainable parameters, from the formula in this module's docstring."""
    return (
        backbone_params(a.backbone)
        + features(a) * a.embedding
        + a.embedding
        + 2 * a.embedding
        + a.embedding * a.classes
    )


def sampled_classes(a: FaceArch, shard: int) -> int:
    """Classes one rank's shard of `shard` classes uses in a step: all, or `sample` percent (at least 1)."""
    return shard if a.sample >= 100 else max(1, shard * a.sample // 100)


def forward_flops(case: Case, input_size: int | None = None) -> float:
    """Forward FLOPs of one sample: the backbone and the embedding (`flops.resnet_macs` with a 512-wide head), then
    the classifier over the classes a step uses (every rank's sample together)."""
    a = face_arch(case)
    side = input_size or (case.input.size if isinstance(case.input, ImageInput) else 112)
    return 2.0 * (resnet_macs(a.backbone, side, a.embedding) + a.embedding * sampled_classes(a, a.classes))


def _configured(case: Case) -> Case:
    """The case at its classes and classifier mode: that architecture, input labels and parameter count."""
    sample = case.param("sample")
    if not 1 <= sample <= 100:
        raise SpecError(f"{case.name}: sample is a percent of the classes, 1 to 100; got {sample}")
    arch = dataclasses.replace(
        face_arch(case), classes=case.param("classes"), model_parallel=case.param("model_parallel") == 1, sample=sample
    )
    if sample < 100 and not arch.model_parallel:
        raise SpecError(f"{case.name}: Partial FC samples each rank's shard: set model_parallel=1 with sample<100")
    image = dataclasses.replace(case.input, classes=arch.classes) if isinstance(case.input, ImageInput) else case.input
    return dataclasses.replace(case, arch=arch, input=image, param_count=param_count(arch))


register_forward_flops(FaceArch, forward_flops)
_ARCH = FaceArch()

CASE = register(
    Case(
        name="face",
        title="Face recognition (ArcFace, ResNet-50)",
        task="face_recognition",
        input=ImageInput(size=112, classes=_ARCH.classes),
        optimizer=Optimizer("sgd", lr=0.1, momentum=0.9, weight_decay=5e-4, lr_ref_batch=512),
        param_count=param_count(_ARCH),
        batch_fixed=64,
        batch_cpu=8,
        arch=_ARCH,
        loss=Loss("arcface"),
        aliases=("insightface", "arcface"),
        derive=_configured,
        params=(
            CaseParam(
                "classes",
                _ARCH.classes,
                "identities the classifier holds (MS1MV2's 85,742 by default)",
                search=(1_000, 100_000_000, 1_000),
            ),
            CaseParam(
                "model_parallel",
                0,
                "1: split the classifier by classes across the ranks, features "
                "all-gathered, softmax across ranks; 0: the whole classifier on every rank",
                choices=(0, 1),
                splits_model=True,
            ),
            CaseParam(
                "sample",
                100,
                "percent of each rank's classes a step uses (Partial FC: 10, with model_parallel=1); 100: all",
            ),
        ),
        notes="InsightFace's arcface_torch recipe: ArcFace m 0.5 s 64, SGD momentum 0.9 lr 0.1 wd 5e-4, 112x112.",
    )
)

__all__ = [
    "CASE",
    "DLPERF_MAX_CLASSES",
    "MODES",
    "backbone_params",
    "face_arch",
    "features",
    "forward_flops",
    "param_count",
    "sampled_classes",
]
