"""AlexNet (the one-GPU variant: 64-192-384-256-256 convs, two 4096 FC layers), 224x224."""

from dlbench.cases import Case, ImageInput, Optimizer, register

CASE = register(Case(
    name="alexnet", title="AlexNet", task="image_classification",
    input=ImageInput(size=224), optimizer=Optimizer("sgd", lr=0.128, momentum=0.9, lr_ref_batch=256),
    params=61_100_840, batch_fixed=64, batch_cpu=16,
))
