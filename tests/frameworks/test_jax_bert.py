"""The JAX BERT's masked-LM head as published: it runs on the gathered positions only ([B, P, vocab]) and its
loss is Google's weighted mean, so padded predictions (weight 0) change nothing. A tiny BertConfig in the jax
environment (this file never imports jax); skipped, naming it, where that environment is absent."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.support.frameworks import interpreter_or_skip

pytestmark = [pytest.mark.framework("jax"), pytest.mark.slow]

GATHER = """
import json, jax, jax.numpy as jnp, numpy as np, optax
from dlbench.backends.jax.bert import BertForPretraining, mlm_nsp_loss
from dlbench.cases.arch import BertConfig

cfg = BertConfig(vocab_size=50, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32,
                 max_position_embeddings=16, dropout=0.0, attention_dropout=0.0)
model = BertForPretraining(cfg)
rng = np.random.default_rng(0)
ids = jnp.asarray(rng.integers(0, 50, (2, 8)), jnp.int32)
types = jnp.zeros((2, 8), jnp.int32)
mask = jnp.ones((2, 8), jnp.int32)
positions = jnp.asarray([[1, 3, 0], [2, 5, 6]], jnp.int32)
params = model.init(jax.random.PRNGKey(0), ids, types, mask, positions, train=False)
mlm, nsp = model.apply(params, ids, types, mask, positions, train=False)
mlm_ids = jnp.asarray([[4, 7, 0], [1, 2, 3]], jnp.int32)
weights = jnp.asarray([[1, 1, 0], [1, 1, 1]], jnp.float32)
nsp_labels = jnp.asarray([0, 1], jnp.int32)
loss = mlm_nsp_loss(mlm, nsp, mlm_ids, weights, nsp_labels)
# the padded prediction (row 0, slot 2) given another label and another logit row: the loss must not move
other = mlm_nsp_loss(mlm.at[0, 2].set(5.0), nsp, mlm_ids.at[0, 2].set(9), weights, nsp_labels)
ce = optax.softmax_cross_entropy_with_integer_labels(mlm, mlm_ids)
expected = float((ce * weights).sum() / (weights.sum() + 1e-5)
                 + optax.softmax_cross_entropy_with_integer_labels(nsp, nsp_labels).mean())
# position 1 of row 0 gathered twice must give the same logits both times
twice = model.apply(params, ids, types, mask, jnp.asarray([[1, 1, 1], [2, 2, 2]], jnp.int32), train=False)[0]
print(json.dumps({"mlm_shape": list(mlm.shape), "nsp_shape": list(nsp.shape), "loss": float(loss),
                  "other": float(other), "expected": expected,
                  "same_slot": bool(jnp.allclose(twice[0, 0], mlm[0, 0], atol=1e-5))}))
"""


def test_masked_lm_head_runs_on_gathered_positions_with_weighted_loss() -> None:
    python = interpreter_or_skip("jax")
    proc = subprocess.run([python, "-c", GATHER], capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    answer = json.loads(proc.stdout.strip().splitlines()[-1])
    assert answer["mlm_shape"] == [2, 3, 50] and answer["nsp_shape"] == [2, 2]
    assert answer["loss"] == pytest.approx(answer["expected"], rel=1e-5)
    assert answer["other"] == pytest.approx(answer["loss"], rel=1e-6)  # weight 0: padding changes nothing
    assert answer["same_slot"]
