"""The canonical weights and batch: drawn from the seed alone, each tensor from its own stream; the check's case
has no dropout and plain SGD."""

from __future__ import annotations

import numpy as np

from dlbench.canonical import names, values
from dlbench.cases import get_case
from dlbench.cases.arch import BertConfig, MoeConfig


def test_weights_follow_the_seed_and_each_tensor_its_own_stream() -> None:
    case = get_case("llama_tiny")
    a, b, c = values.weights(case, 0), values.weights(case, 0), values.weights(case, 1)
    assert a.keys() == {t.name for t in names.tensors(case)}
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not any(np.array_equal(a[k], c[k]) for k in a)
    t = names.Tensor("x.weight", (4, 8), "linear")
    assert np.array_equal(values._draw(t, 0), values._draw(t, 0))  # a tensor's values do not depend on the others


def test_every_mapping_mistake_shows_in_the_values() -> None:
    w = values.weights(get_case("resnet50"))
    assert all(v.dtype == np.float32 and v.std() > 0 for v in w.values())
    assert abs(float(w["stem.1.weight"].mean()) - 1.0) < 0.05 and np.all(w["stem.1.running_var"] > 0.4)
    assert 0.05 < float(w["stages.0.0.bn3.weight"].mean()) < 0.15  # the residual branch's last norm: small
    assert abs(float(w["fc.weight"].std()) - 2048**-0.5) < 0.01


def test_the_bert_batch_pads_its_last_row_and_one_prediction() -> None:
    b = values.batch(get_case("bert_base"), 2, 32)
    assert b["attention_mask"][-1, -3:].sum() == 0 and b["attention_mask"][0].all()
    assert np.all(b["input_ids"][b["attention_mask"] == 1] > 0) and np.all(b["input_ids"][-1, -3:] == 0)
    real = b["mlm_weights"] > 0
    assert b["mlm_weights"][-1, -1] == 0 and real.sum() == real.size - 1
    assert np.all(b["attention_mask"][np.arange(2)[:, None], b["mlm_positions"]][real] == 1)


def test_the_check_case_has_no_dropout_and_plain_sgd() -> None:
    bert = values.check_case(get_case("bert_base"), 0.5)
    assert isinstance(bert.arch, BertConfig) and bert.arch.dropout == bert.arch.attention_dropout == 0.0
    assert (bert.optimizer.name, bert.optimizer.momentum, bert.optimizer.weight_decay) == ("sgd", 0.0, 0.0)
    assert bert.optimizer.lr_for(2) == bert.optimizer.lr_for(256) == 0.5
    assert values.check_case(get_case("vgg16")).arch.dropout == 0.0  # type: ignore[union-attr]
    assert isinstance(values.check_case(get_case("moe_tiny")).arch, MoeConfig)
