"""ResNet-152 (v1.5 bottlenecks), as in tf_cnn_benchmarks' tables."""

from dlbench.cases import Case, ImageInput, Optimizer, register
from dlbench.cases.arch import ResNetArch

CASE = register(
    Case(
        name="resnet152",
        title="ResNet-152",
        task="image_classification",
        input=ImageInput(size=224),
        optimizer=Optimizer("sgd", lr=0.128, momentum=0.9, lr_ref_batch=256),
        param_count=60_192_808,
        batch_fixed=64,
        batch_cpu=4,
        arch=ResNetArch(stages=(3, 8, 36, 3)),
    )
)
