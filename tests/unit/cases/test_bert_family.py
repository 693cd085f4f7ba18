"""BERT's smaller members (#44): exact parameter counts against Hugging Face's BertForPreTraining built on the meta
device (no weights, no download) and against the torch model, heads and feed-forward as BERT-base's, the input a
member trains on, one-line refusals, and the learning rate: BERT-base's own at its shape, a narrower member's by the
documented inverse-width rule."""

from __future__ import annotations

import pytest

from dlbench.cases import TextInput, get_case
from dlbench.cases.arch import BertConfig
from dlbench.cases.bert_base import learning_rate
from dlbench.spec import SpecError

torch = pytest.importorskip("torch", reason="torch is not installed in this environment")
HOW = "pip install -e '.[test]' (a test-only dependency)"
# (hidden, layers, vocab): BERT-base, the compact BERTs Tiny and Mini (Turc et al. 2019) at their WordPiece
# vocabulary, and the member --converge's reference point trains (the Markov source's 64 tokens and [MASK] fit in 128).
SHAPES = [(768, 12, 30522), (128, 2, 30522), (256, 4, 30522), (128, 2, 128)]


def _member(hidden: int, layers: int, vocab: int) -> dict[str, int]:
    return {"hidden": hidden, "layers": layers, "vocab": vocab}


@pytest.mark.parametrize(("hidden", "layers", "vocab"), SHAPES)
def test_a_member_counts_as_hugging_faces_bert_for_pretraining(hidden: int, layers: int, vocab: int) -> None:
    transformers = pytest.importorskip("transformers", reason=f"transformers is not installed: {HOW}")
    config = transformers.BertConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 64,
        intermediate_size=4 * hidden,
    )
    with torch.device("meta"):
        hf = transformers.BertForPreTraining(config)  # its MLM decoder tied to the word embeddings, as dlbench's
    case = get_case("bert_base").configured(_member(hidden, layers, vocab))
    assert sum(p.numel() for p in hf.parameters()) == case.param_count
    from dlbench.backends.torch.models import build_model, count_trainable

    with torch.device("meta"):
        assert count_trainable(build_model(case)) == case.param_count


def test_defaults_are_bert_base_and_its_learning_rate_is_kept() -> None:
    base = get_case("bert_base")
    assert base.param_count == 110_106_428 and base.optimizer.lr == 1e-4 and base.arch == BertConfig()
    explicit = base.configured({"hidden": 768, "layers": 12, "heads": 12, "seq": 128, "vocab": 30522})
    assert (explicit.param_count, explicit.arch, explicit.input, explicit.optimizer) == (
        base.param_count,
        base.arch,
        base.input,
        base.optimizer,
    )
    assert learning_rate(1024) == 1e-4  # wider than BERT-base: its rate (BERT-large trained at 1e-4 too)


def test_a_small_member_has_bert_bases_proportions_input_and_a_scaled_learning_rate() -> None:
    tiny = get_case("bert_base").configured({"hidden": 128, "layers": 2, "seq": 32, "vocab": 128})
    arch = tiny.arch
    assert isinstance(arch, BertConfig)
    assert (arch.num_heads, arch.intermediate_size, arch.max_position_embeddings) == (2, 512, 512)
    assert tiny.input == TextInput(seq_len=32, vocab=128, max_predictions=5)  # 20 at 128 tokens, scaled
    assert tiny.optimizer.name == "adam" and tiny.optimizer.lr == pytest.approx(6e-4)  # 1e-4 x 768 / 128
    assert get_case("bert_base").configured({"hidden": 256}).optimizer.lr == pytest.approx(3e-4)


@pytest.mark.parametrize(
    ("params", "words"),
    [
        ({"hidden": 100, "heads": 3}, "multiple of heads"),
        ({"seq": 513}, "at most 512"),
        ({"layers": 0}, "at least 1"),
        ({"ffn": 4}, "has no parameter ffn"),
    ],
)
def test_a_bad_member_is_refused_in_one_line(params: dict[str, int], words: str) -> None:
    with pytest.raises(SpecError, match=words) as err:
        get_case("bert_base").configured(params)
    assert "\n" not in str(err.value)
