"""AlexNet (the one-GPU variant: 64-192-384-256-256 convs, two 4096 FC layers), 224x224."""

from dlbench.cases import Case, ImageInput, Optimizer, register
from dlbench.cases.arch import AlexNetArch, ConvLayer

CASE = register(
    Case(
        name="alexnet",
        title="AlexNet",
        task="image_classification",
        input=ImageInput(size=224),
        optimizer=Optimizer("sgd", lr=0.128, momentum=0.9, lr_ref_batch=256),
        param_count=61_100_840,
        batch_fixed=64,
        batch_cpu=16,
        arch=AlexNetArch(
            convs=(
                ConvLayer(64, 11, stride=4, padding=2, pool_after=True),
                ConvLayer(192, 5, padding=2, pool_after=True),
                ConvLayer(384, 3, padding=1),
                ConvLayer(256, 3, padding=1),
                ConvLayer(256, 3, padding=1, pool_after=True),
            )
        ),
    )
)
