"""Issue 21, "the first GPU run must give right numbers": one CPU test per defect a second read of the GPU paths
found. NVML and CUDA are mocked only at their boundaries (pynvml, torch.cuda's answers); the torch optimizer
tests run torch's real fused kernels, which torch 2.4+ has on the CPU too."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import pytest

from dlbench.cases import get_case
from dlbench.numerics import resolve_precision

if TYPE_CHECKING:
    import torch

    from dlbench.backends.torch.step import TorchTrainer


def _torch() -> Any:
    """torch, imported by the tests that use it (the other tests of this file need no framework)."""
    return pytest.importorskip("torch")

# ---------------------------------------------------------------------------------------------- gpu-a's tests


def _trainer(optimizer: str, fused: bool, batches: list[dict[str, torch.Tensor]]) -> TorchTrainer:
    """dlbench's TorchTrainer in amp (float16 autocast, a GradScaler) for an image case whose optimizer is the
    named case's (resnet50: SGD momentum 0.9 + weight decay; bert_base: Adam; gpt2_small: AdamW), on a tiny
    model, fused or not, on the CPU."""
    torch = _torch()
    from dlbench.backends.torch.step import TorchTrainer

    owner = {"sgd": "resnet50", "adam": "bert_base", "adamw": "gpt2_small"}[optimizer]
    case = dataclasses.replace(get_case("resnet50"), optimizer=get_case(owner).optimizer)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 4 * 4, 10))
    return TorchTrainer(case, model, iter(batches), torch.device("cpu"), resolve_precision("amp", "cuda"),
                        compile_model=False, global_batch=256, fused=fused)


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "adamw"])
def test_fused_optimizer_skipped_step(optimizer: str) -> None:
    """A first step whose fp16 gradients overflow (the GradScaler finds inf, as at ResNet-50's start) leaves the
    weights as they were and the fused optimizer's state as a never-stepped one's (zeros); the next step then
    equals the unfused optimizer's. Torch's real fused kernels on the CPU. Tolerance: 1 float32 ulp-scale (rtol 1e-6), since the
    fused kernel may contract the update into one FMA where the unfused one rounds twice."""
    torch = _torch()
    g = torch.Generator().manual_seed(1)
    labels = torch.tensor([1, 7])
    overflow = {"images": torch.full((2, 3, 4, 4), 1e38), "labels": labels}  # inf in float16 autocast
    normal = {"images": torch.randn(2, 3, 4, 4, generator=g), "labels": labels}
    fused = _trainer(optimizer, True, [overflow, normal])
    plain = _trainer(optimizer, False, [overflow, normal])
    assert fused.optimizer.defaults.get("fused") is True and not plain.optimizer.defaults.get("fused")
    weights = [p.detach().clone() for p in fused.model.parameters()]
    for p in weights:  # leave freed, non-zero memory of the parameters' sizes for an uninitialised buffer to take
        torch.full_like(p, 3e38).sum()
    fused.train_step(fused.next_batch())
    assert fused.scaler is not None and fused.scaler.get_scale() == 32768.0  # the step found inf and was skipped
    for before, p in zip(weights, fused.model.parameters()):
        assert torch.equal(before, p.detach())
    state = fused.optimizer.state_dict()["state"]
    assert len(state) == len(weights)
    for entry in state.values():  # what a never-stepped optimizer holds: zero momentum, moments and step count
        for name, value in entry.items():
            assert not torch.as_tensor(value).any(), (name, value)
    fused.train_step(fused.next_batch())
    for _ in range(2):  # the unfused optimizer: skipped by the scaler's host check, then the same normal step
        plain.train_step(plain.next_batch())
    for a, b in zip(fused.model.parameters(), plain.model.parameters()):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, rtol=1e-6, atol=0.0)
