"""The canonical tensors of every seed case (and every other case that has them): their count is the case's reference
parameter count, and they are the torch backend's own names and shapes (the identity map), built on the meta device
so that even the 8B decoders cost nothing. A later case without a canonical list says so (Unsupported)."""

from __future__ import annotations

import pytest
import torch

from dlbench.backends.torch.models import build_model
from dlbench.canonical import names
from dlbench.cases import Case, all_cases, get_case

# The seed studies' cases (#45): each has a canonical tensor list.
SEED = ("resnet50", "resnet152", "vgg16", "alexnet", "inception_v3", "bert_base", "gpt", "wide_deep", "face")
SEED_DECODERS = ("llama_tiny", "moe_tiny")


def _listed(name: str) -> tuple[Case, list[names.Tensor]]:
    """The case and its canonical tensors; a skip, saying so, for a later case without a list (never a seed case)."""
    case = get_case(name)
    try:
        return case, names.tensors(case)
    except names.Unsupported as exc:
        assert name not in SEED + SEED_DECODERS, exc
        pytest.skip(f"{name} has no canonical tensor list: {exc}")


@pytest.mark.parametrize("case", [c.name for c in all_cases()])
def test_canonical_tensors_count_the_reference_parameters(case: str) -> None:
    c, _ = _listed(case)
    assert names.parameter_count(c) == c.param_count


@pytest.mark.parametrize("case", [c.name for c in all_cases()])
def test_canonical_tensors_are_torch_state_dict(case: str) -> None:
    c, listed = _listed(case)
    with torch.device("meta"):
        model = build_model(c)
    state = {k: tuple(v.shape) for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
    tied = {k for k in state if k == "lm_head.weight"} - {t.name for t in listed}
    canonical = {t.name: t.shape for t in listed}
    assert {k: v for k, v in state.items() if k not in tied} == canonical


def test_running_statistics_are_buffers_and_names_are_unique() -> None:
    ts = names.tensors(get_case("resnet50"))
    assert len({t.name for t in ts}) == len(ts)
    assert {t.role for t in ts if not t.trainable} == {"running_mean", "running_var"}
    assert sum(t.role == "residual_norm_weight" for t in ts) == 16  # bn3 of each of ResNet-50's 16 blocks
