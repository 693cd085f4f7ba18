"""--converge's targets and its one-line refusals (refusals.py), before anything trains."""

from __future__ import annotations

import dataclasses

import pytest

from dlbench.analysis.targets import target_for
from dlbench.cases import get_case
from dlbench.data.learnable import MarkovTokens
from dlbench.refusals import Impossible, refusal, refuse_impossible
from dlbench.spec import PointSpec, preset


def _spec(**kw: object) -> PointSpec:
    base = PointSpec(framework="torch", model="resnet50", batch_size=8, protocol=preset("quick"), converge=True)
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


def test_every_kind_with_learnable_data_has_a_target_above_its_best_loss() -> None:
    for name in ("resnet50", "gpt2_small", "llama_tiny", "bert_base", "wide_deep"):
        t = target_for(get_case(name))
        assert t is not None and t.loss > t.best_loss and t.budget > 0 and t.every > 0
    bert = target_for(get_case("bert_base"))
    assert bert is not None and bert.loss < MarkovTokens().unigram_entropy()  # beyond the unigram level
    ctr = target_for(get_case("wide_deep"))
    assert ctr is not None and ctr.eval_auc is not None and 0.5 < ctr.eval_auc < 1 and ctr.auc is None
    assert target_for(get_case("face")) is None


def test_a_plain_converge_point_is_not_refused() -> None:
    assert refusal(_spec()) is None
    assert refusal(_spec(precision="bf16")) is None
    assert refusal(_spec(framework="paddle", model="llama_tiny")) is None  # paddle's decoders (#46)
    assert refusal(_spec(framework="tf", model="moe_tiny")) is None  # and TF/Keras' (#46)
    assert refusal(_spec(framework="paddle")) is None  # and image classifiers, as TensorFlow's (#44)
    assert refusal(_spec(framework="tf")) is None
    assert refusal(_spec(model="bert_base", case_params=(("vocab", 65),))) is None  # the 64 tokens and [MASK] fit
    assert refusal(_spec(framework="mxnet")) is None  # MXNet's and MegEngine's image classifiers (#44)
    assert refusal(_spec(framework="megengine")) is None
    for framework in ("mindspore", "jittor"):  # their image classifiers and decoders (#44)
        assert refusal(_spec(framework=framework)) is None
        assert refusal(_spec(framework=framework, model="llama_tiny")) is None


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"model": "face"}, "no target for face"),
        ({"precision": "amp"}, "no target for amp"),
        ({"framework": "keras_jax"}, "no learnable data wired for keras_jax"),
        ({"framework": "mxnet", "model": "bert_base"}, "mxnet's image_classification cases only, not bert_base"),
        ({"framework": "megengine", "model": "bert_base"}, "megengine's image_classification cases only"),
        ({"framework": "mxnet", "devices_per_node": 2}, "mxnet on one device only"),
        ({"framework": "paddle", "model": "wide_deep"}, "paddle's causal_lm, image_classification cases only"),
        ({"framework": "tf", "model": "wide_deep"}, "tf's causal_lm, image_classification cases only, not wide_deep"),
        ({"framework": "tf", "devices_per_node": 2}, "tf on one device only"),
        ({"framework": "jittor", "model": "bert_base"}, "jittor's causal_lm, image_classification cases only"),
        ({"framework": "mindspore", "model": "bert_base"}, "mindspore's causal_lm, image_classification cases only"),
        ({"converge_steps": 0}, "at least 1"),
        ({"converge_target": 0.0}, "best possible loss"),
        ({"model": "gpt2_small", "converge_target": 1.0}, "cannot be reached"),
        ({"model": "bert_base", "case_params": (("vocab", 64),)}, "its vocab must be at least 65; got 64"),
        ({"model": "gpt", "case_params": (("vocab", 32),)}, "its vocab must be at least 64; got 32"),
    ],
)
def test_bad_converge_input_is_one_line_before_anything_runs(change: dict[str, object], words: str) -> None:
    reason = refusal(_spec(**change))
    assert reason is not None and words in reason and "\n" not in reason
    with pytest.raises(Impossible, match=words):
        refuse_impossible([_spec(**change)])


def test_converge_fields_keep_old_keys_and_round_trip() -> None:
    plain = PointSpec(framework="torch", model="resnet50", batch_size=8, protocol=preset("quick"))
    assert "converge" not in plain.key()
    spec = _spec(converge_steps=50, converge_target=0.5)
    assert PointSpec.from_json(spec.to_json()) == spec and spec.key() != plain.key()
