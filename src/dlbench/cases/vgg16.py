"""VGG-16 (configuration D) without batch norm, 224x224 (CAICT, tf_cnn_benchmarks)."""

from dlbench.cases import Case, ImageInput, Optimizer, register
from dlbench.cases.arch import POOL, VggArch

M = POOL
CASE = register(
    Case(
        name="vgg16",
        title="VGG-16",
        task="image_classification",
        input=ImageInput(size=224),
        optimizer=Optimizer("sgd", lr=0.128, momentum=0.9, lr_ref_batch=256),
        param_count=138_357_544,
        batch_fixed=64,
        batch_cpu=4,
        arch=VggArch(layers=(64, 64, M, 128, 128, M, 256, 256, 256, M, 512, 512, 512, M, 512, 512, 512, M)),
    )
)
