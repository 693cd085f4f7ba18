"""ResNet-50 v1.5: stride 2 in the 3x3 conv of each down-sampling bottleneck (NVIDIA / DLPerf / Paddle)."""

from dlbench.cases import Case, ImageInput, Optimizer, register
from dlbench.cases.arch import ResNetArch

CASE = register(
    Case(
        name="resnet50",
        title="ResNet-50 v1.5",
        task="image_classification",
        input=ImageInput(size=224),
        optimizer=Optimizer("sgd", lr=0.128, momentum=0.9, lr_ref_batch=256),
        param_count=25_557_032,
        batch_fixed=64,
        batch_cpu=8,
        arch=ResNetArch(stages=(3, 4, 6, 3)),
        aliases=("resnet50_v1.5",),
    )
)
