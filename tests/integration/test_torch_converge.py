"""PyTorch's convergence sanity, as every other backend has it: on a fixed small batch, the loss after 20
steps is below the loss at step 1, and finite throughout (`python -m dlbench.check converge`)."""

from __future__ import annotations

import sys

import pytest
from conftest import check_loss_falls, convergence_cases

pytest.importorskip("torch", reason="torch is not installed in this environment: pip install -e '.[torch]'")
pytestmark = [pytest.mark.framework("torch"), pytest.mark.slow]

# (input size, batch) near the smallest each architecture accepts; AlexNet's dropouts need 8 images to keep
# the loss of a memorised batch falling (as in the other frameworks' files); BERT runs 16 tokens.
TINY = {"resnet50": (32, 2), "resnet152": (32, 2), "vgg16": (32, 2), "alexnet": (64, 8),
        "inception_v3": (75, 2), "bert_base": (16, 2)}


@pytest.mark.parametrize("model", convergence_cases(list(TINY)))
def test_loss_falls_in_20_steps(model: str) -> None:
    check_loss_falls(sys.executable, "torch", model, *TINY[model])
