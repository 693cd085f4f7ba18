"""The pure-torch models: exact trainable-parameter counts, and one small forward + backward each."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from dlbench.backends.torch.models import build_model, count_trainable, train_loss  # noqa: E402
from dlbench.cases import get_case  # noqa: E402

CASES = ["resnet50", "resnet152", "vgg16", "alexnet", "inception_v3", "bert_base"]


def _batch(name: str, batch: int = 2) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    if name == "bert_base":
        from dlbench.data.synthetic import synthetic_bert

        arrays = synthetic_bert(get_case(name).input, batch, 16, seed=0)
        arrays["attention_mask"][1, 12:] = 0  # some padding
        return {k: torch.from_numpy(v) for k, v in arrays.items()}
    size = 80 if name == "inception_v3" else 64
    return {
        "images": torch.randn(batch, 3, size, size, generator=g),
        "labels": torch.randint(0, 1000, (batch,), generator=g),
    }


@pytest.mark.parametrize("name", CASES)
def test_parameter_count_matches_case(name: str) -> None:
    assert count_trainable(build_model(get_case(name))) == get_case(name).param_count


def test_a_case_the_backend_lacks_is_unsupported_with_a_reason() -> None:
    import dataclasses

    from dlbench.backends.torch.backend import TorchBackend

    other = dataclasses.replace(get_case("resnet50"), name="resnet18")
    assert TorchBackend().case_support(other) == "the PyTorch backend does not build resnet18 yet"
    assert TorchBackend().case_support(get_case("resnet50")) is None


def test_models_follow_the_case_s_architecture_table() -> None:
    import dataclasses

    base = get_case("resnet50")
    deeper = dataclasses.replace(base, arch=dataclasses.replace(base.arch, stages=(3, 4, 23, 3)))
    assert count_trainable(build_model(deeper)) == 44_549_160  # ResNet-101's published count


def test_bert_decoder_is_tied_to_word_embeddings() -> None:
    """The MLM decoder is the word-embedding matrix: no second [vocab, hidden] parameter, and the MLM loss sends
    gradient to embedding rows no input token uses (only the decoder reads them)."""
    case = get_case("bert_base")
    model = build_model(case).train()
    word = model.embeddings.word_embeddings.weight
    assert [p for p in model.parameters() if p.shape == word.shape] == [word]
    batch = _batch("bert_base")
    train_loss(case, model, batch).backward()
    unused = sorted(set(range(word.shape[0])) - set(batch["input_ids"].flatten().tolist()))[:50]
    assert word.grad is not None and word.grad[unused].abs().sum().item() > 0


@pytest.mark.parametrize("name", CASES)
def test_forward_backward_small(name: str) -> None:
    torch.manual_seed(0)
    model = build_model(get_case(name)).train()
    loss = train_loss(get_case(name), model, _batch(name))
    assert loss.ndim == 0 and math.isfinite(loss.item())
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None for g in grads)
    assert any(g.abs().sum().item() > 0 for g in grads)


def test_bert_output_shapes() -> None:
    model = build_model(get_case("bert_base")).eval()
    b = _batch("bert_base")
    with torch.no_grad():
        mlm, nsp = model(b["input_ids"], b["token_type_ids"], b["attention_mask"].bool(), b["mlm_positions"])
    # the vocabulary projection runs on the gathered masked positions only: 20 x 16 / 128 -> 2 per sequence
    assert mlm.shape == (2, 2, 30522) and nsp.shape == (2, 2)


def test_inception_eval_returns_logits_only() -> None:
    model = build_model(get_case("inception_v3")).eval()
    with torch.no_grad():
        out = model(torch.randn(1, 3, 80, 80))
    assert isinstance(out, torch.Tensor) and out.shape == (1, 1000)


@pytest.mark.parametrize("name", ["resnet50", "inception_v3"])
def test_channels_last_and_autocast(name: str) -> None:
    model = build_model(get_case(name)).train().to(memory_format=torch.channels_last)
    batch = _batch(name)
    batch["images"] = batch["images"].contiguous(memory_format=torch.channels_last)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = train_loss(get_case(name), model, batch)
    assert math.isfinite(loss.item())
    loss.backward()
