"""PyTorch's GPT-2 small learns: on one fixed batch of 2 sequences of 32 tokens, the causal-LM loss after 20 AdamW
steps is below the first and finite throughout (`python -m dlbench.check converge`); about 2 CPU-minutes."""

from __future__ import annotations

import sys

import pytest

from tests.support.frameworks import check_loss_falls

pytest.importorskip("torch", reason="torch is not installed in this environment: pip install -e '.[torch]'")
pytestmark = [pytest.mark.framework("torch"), pytest.mark.slow]


def test_gpt2_small_loss_falls_in_20_steps() -> None:
    check_loss_falls(sys.executable, "torch", "gpt2_small", 32, 2)
