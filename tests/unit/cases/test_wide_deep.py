"""The wide_deep case: parameter count as a formula of the vocabulary (checked against hand arithmetic and the
torch model's exact count), its synthetic Criteo-shaped batch, and the torch model training with sparse
(SparseAdam + Adam) and dense embedding gradients."""

from __future__ import annotations

import numpy as np
import pytest

from dlbench.cases import get_case
from dlbench.cases.wide_deep import DLPERF_VOCABS, param_count, wide_deep_arch
from dlbench.data.synthetic import synthetic_ctr
from dlbench.spec import SpecError

# DLPerf's deep part: (26 x 32 + 13) -> 7 x 1024 -> 1, each layer with a bias.
MLP = (845 * 1024 + 1024) + 6 * (1024 * 1024 + 1024) + (1024 + 1)


def test_dlperf_shape_and_default() -> None:
    case = get_case("wide_deep")
    a = wide_deep_arch(case)
    assert (a.embedding, a.hidden, case.batch_fixed, case.loss.kind) == (32, (1024,) * 7, 16384, "bce")
    assert MLP == 7_164_929
    assert case.param_count == 33 * 3_200_000 + MLP
    assert DLPERF_VOCABS[0] == 3_200_000 and DLPERF_VOCABS[-1] == 819_200_000


@pytest.mark.parametrize("vocab", [1000, 3_200_000, 819_200_000])
def test_parameter_count_follows_vocab(vocab: int) -> None:
    case = get_case("wide_deep").configured({"vocab": vocab})
    assert wide_deep_arch(case).vocab == vocab
    assert case.param_count == param_count(case.arch, case.input) == 33 * vocab + MLP  # type: ignore[arg-type]


def test_sparse_is_0_or_1() -> None:
    with pytest.raises(SpecError, match="sparse must be one of 0, 1"):
        get_case("wide_deep").configured({"sparse": 2})


def test_synthetic_batch_is_criteo_shaped() -> None:
    b = synthetic_ctr(get_case("wide_deep").input, 64, 1000, seed=3)  # type: ignore[arg-type]
    assert b["dense"].shape == (64, 13) and b["dense"].dtype == np.float32
    assert b["deep_ids"].shape == (64, 26) and b["wide_ids"].shape == (64, 2)
    assert 0 <= b["deep_ids"].min() and b["deep_ids"].max() < 1000
    assert set(np.unique(b["labels"])) <= {0.0, 1.0} and b["labels"].shape == (64, 1)


torch = pytest.importorskip("torch", reason="the torch model tests need torch")


@pytest.mark.parametrize("sparse", [1, 0])
def test_torch_model_count_and_training(sparse: int) -> None:
    from dlbench.backends.torch.models import build_model, count_trainable, train_loss
    from dlbench.backends.torch.step import make_optimizer
    from dlbench.backends.torch.wide_deep import SplitAdam

    torch.manual_seed(0)
    case = get_case("wide_deep").configured({"vocab": 1000, "sparse": sparse})
    model = build_model(case)
    assert count_trainable(model) == case.param_count == 33 * 1000 + MLP
    opt = make_optimizer(case, model, 64, fused=False)
    assert isinstance(opt, SplitAdam) == bool(sparse)
    batch = {k: torch.from_numpy(v) for k, v in synthetic_ctr(case.input, 64, 1000, seed=0).items()}  # type: ignore[arg-type]
    model.train()
    losses = []
    for _ in range(8):
        opt.zero_grad(set_to_none=True)
        loss = train_loss(case, model, batch)
        loss.backward()
        if sparse:
            assert model.deep.weight.grad is not None and model.deep.weight.grad.is_sparse
        opt.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < losses[0]


def test_a_cpu_allocation_failure_is_oom() -> None:
    """A table larger than the memory left fails in torch's CPU allocator: that is oom, which bounds a search."""
    from dlbench.backends.torch.backend import TorchBackend

    msg = (
        "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to "
        "allocate 26214400000 bytes. Error code 12 (Cannot allocate memory)"
    )
    assert TorchBackend().oom_error(RuntimeError(msg))
    assert not TorchBackend().oom_error(RuntimeError("cuDNN error: CUDNN_STATUS_INTERNAL_ERROR"))


def test_training_flops_are_the_deep_layers_multiply_adds() -> None:
    case = get_case("wide_deep")
    macs = 845 * 1024 + 6 * 1024 * 1024 + 1024
    assert case.train_flops_per_sample() == 3 * 2 * macs == 42_946_560
    assert get_case("wide_deep").configured({"vocab": 1000}).train_flops_per_sample() == 42_946_560
