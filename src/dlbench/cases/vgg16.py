"""VGG-16 without batch norm, 224x224 (CAICT, tf_cnn_benchmarks)."""

from dlbench.cases import Case, ImageInput, Optimizer, register

CASE = register(Case(
    name="vgg16", title="VGG-16", task="image_classification",
    input=ImageInput(size=224), optimizer=Optimizer("sgd", lr=0.128, momentum=0.9, lr_ref_batch=256),
    params=138_357_544, batch_fixed=64, batch_cpu=4,
))
