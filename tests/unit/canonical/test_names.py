"""The canonical tensors of every case: their count is the case's reference parameter count, and they are the torch
backend's own names and shapes (the identity map), built on the meta device so that even the 8B decoders cost
nothing."""

from __future__ import annotations

import pytest
import torch

from dlbench.backends.torch.models import build_model
from dlbench.canonical import names
from dlbench.cases import all_cases, get_case


@pytest.mark.parametrize("case", [c.name for c in all_cases()])
def test_canonical_tensors_count_the_reference_parameters(case: str) -> None:
    assert names.parameter_count(get_case(case)) == get_case(case).param_count


@pytest.mark.parametrize("case", [c.name for c in all_cases()])
def test_canonical_tensors_are_torch_state_dict(case: str) -> None:
    c = get_case(case)
    with torch.device("meta"):
        model = build_model(c)
    state = {k: tuple(v.shape) for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
    tied = {k for k in state if k == "lm_head.weight"} - {t.name for t in names.tensors(c)}
    canonical = {t.name: t.shape for t in names.tensors(c)}
    assert {k: v for k, v in state.items() if k not in tied} == canonical


def test_running_statistics_are_buffers_and_names_are_unique() -> None:
    ts = names.tensors(get_case("resnet50"))
    assert len({t.name for t in ts}) == len(ts)
    assert {t.role for t in ts if not t.trainable} == {"running_mean", "running_var"}
    assert sum(t.role == "residual_norm_weight" for t in ts) == 16  # bn3 of each of ResNet-50's 16 blocks
