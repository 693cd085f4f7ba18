"""Inception v3 at 299x299 with its auxiliary head (the aux loss is added with weight 0.4)."""

from dlbench.cases import Case, ImageInput, Optimizer, register
from dlbench.cases.arch import InceptionArch, Loss

CASE = register(
    Case(
        name="inception_v3",
        title="Inception v3",
        task="image_classification",
        input=ImageInput(size=299),
        optimizer=Optimizer("sgd", lr=0.128, momentum=0.9, lr_ref_batch=256),
        param_count=27_161_264,
        batch_fixed=64,
        batch_cpu=4,
        arch=InceptionArch(aux_logits=True),
        loss=Loss("softmax_ce", aux_weight=0.4),
    )
)
