"""BERT-base for pre-training (MLM + NSP) for torch-shaped frameworks, laid out like HF ``BertForPreTraining``,
and the losses of the CNN and BERT cases.

Same trainable-parameter count as ``BertForPreTraining(BertConfig())`` (110,106,428): the MLM decoder is the
word-embedding matrix (tied, counted once) with its own bias. As in Google's and NVIDIA's pre-training, the
masked-LM head runs on the masked positions only, gathered first (dlbench.data.synthetic). Query, key and value
are one fused projection (the same parameters as three separate ones). How attention is computed (a fused kernel
or written out) is the framework's `ops.attention`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

from dlbench.backends.context import SINGLE, BuildContext
from dlbench.backends.torchlike.ops import TorchOps
from dlbench.cases import Case
from dlbench.cases.arch import BertConfig


def builder(ops: TorchOps) -> Callable[[Case, BuildContext], Any]:
    """The BERT case's model builder: ``builder(ops)(case, ctx)`` (the same model on every rank)."""
    model = define(ops)

    def build(case: Case, ctx: BuildContext = SINGLE) -> Any:
        return model(case.arch)

    return build


def _encoder_parts(ops: TorchOps) -> tuple[type, type]:
    """BERT's embeddings and its encoder layer on the framework's ``Module``."""
    nn = ops.nn
    Module: Any = nn.Module  # the framework's base class, chosen at run time: a variable, so typed Any

    class BertEmbeddings(Module):
        """Word + position + token-type embeddings, then LayerNorm and dropout."""

        def __init__(self, cfg: BertConfig) -> None:
            super().__init__()
            h = cfg.hidden_size
            self.word_embeddings, self.position_embeddings, self.token_type_embeddings = (
                ops.embedding(cfg.vocab_size, h, padding_idx=cfg.pad_token_id),
                ops.embedding(cfg.max_position_embeddings, h),
                ops.embedding(cfg.type_vocab_size, h),
            )
            self.layer_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
            self.dropout = nn.Dropout(cfg.dropout)

        def forward(self, input_ids: Any, token_type_ids: Any) -> Any:
            x = self.word_embeddings(input_ids) + ops.position_rows(self.position_embeddings, input_ids.shape[1])
            return self.dropout(self.layer_norm(x + self.token_type_embeddings(token_type_ids)))

    class BertLayer(Module):
        """One post-LayerNorm transformer encoder layer: self-attention, then the GELU feed-forward."""

        def __init__(self, cfg: BertConfig) -> None:
            super().__init__()
            h, eps = cfg.hidden_size, cfg.layer_norm_eps
            self.num_heads = cfg.num_heads
            self.qkv, self.attn_out = nn.Linear(h, 3 * h), nn.Linear(h, h)
            self.attn_dropout = nn.Dropout(cfg.attention_dropout)
            self.attn_norm = nn.LayerNorm(h, eps=eps)
            self.intermediate, self.output = nn.Linear(h, cfg.intermediate_size), nn.Linear(cfg.intermediate_size, h)
            self.out_norm = nn.LayerNorm(h, eps=eps)
            self.dropout = nn.Dropout(cfg.dropout)

        def forward(self, x: Any, mask: Any) -> Any:
            q, k, v = ops.split_heads(self.qkv(x), self.num_heads)
            ctx = ops.merge_heads(ops.attention(q, k, v, mask, self.attn_dropout))
            x = self.attn_norm(x + self.dropout(self.attn_out(ctx)))
            return self.out_norm(x + self.dropout(self.output(ops.gelu(self.intermediate(x)))))

    return BertEmbeddings, BertLayer


@cache
def define(ops: TorchOps) -> type:
    """``BertForPretraining(cfg)`` on the framework's ``Module``."""
    nn = ops.nn
    Module: Any = nn.Module
    BertEmbeddings, BertLayer = _encoder_parts(ops)

    class BertForPretraining(Module):
        """BERT encoder with the pooler, the tied masked-LM head and the next-sentence head."""

        def __init__(self, cfg: BertConfig | None = None) -> None:
            super().__init__()
            self.config = cfg = cfg or BertConfig()
            h = cfg.hidden_size
            self.embeddings = BertEmbeddings(cfg)
            self.layers = ops.module_list([BertLayer(cfg) for _ in range(cfg.num_layers)])
            self.pooler, self.nsp = nn.Linear(h, h), nn.Linear(h, 2)
            self.mlm_transform, self.mlm_norm = nn.Linear(h, h), nn.LayerNorm(h, eps=cfg.layer_norm_eps)
            self.mlm_bias = ops.zeros_parameter(cfg.vocab_size)
            self._init_weights()

        def _init_weights(self) -> None:
            """HF BERT init: normal(0, 0.02) weights, zero biases, LayerNorm 1/0, zero padding row."""
            std = self.config.initializer_range
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    ops.normal(m.weight, std)
                if isinstance(m, nn.Linear) and m.bias is not None:
                    ops.zeros(m.bias)
                elif isinstance(m, nn.LayerNorm):
                    ops.ones(m.weight)
                    ops.zeros(m.bias)
            ops.zero_row(self.embeddings.word_embeddings.weight, self.config.pad_token_id)

        def forward(self, input_ids: Any, token_type_ids: Any, attention_mask: Any, mlm_positions: Any) -> Any:
            """MLM logits [B, P, vocab] at the masked positions [B, P], and NSP logits [B, 2]; attention_mask is
            [B, S], 1 = attend, or None when every token is real (no mask: SDPA may pick a fused kernel)."""
            mask = None if attention_mask is None else ops.attention_mask(attention_mask)
            x = self.embeddings(input_ids, token_type_ids)
            for layer in self.layers:
                x = layer(x, mask)
            pooled = ops.tanh(self.pooler(x[:, 0]))
            h = self.mlm_norm(ops.gelu(self.mlm_transform(ops.gather_positions(x, mlm_positions))))
            mlm_logits = ops.tied_logits(h, self.embeddings.word_embeddings.weight, self.mlm_bias)
            return mlm_logits, self.nsp(pooled)

    return BertForPretraining


def train_loss(ops: TorchOps, case: Case, model: Any, batch: Mapping[str, Any]) -> Any:
    """An image or BERT case's training loss on one batch: cross-entropy (+ aux_weight x the auxiliary head's),
    or MLM (Google's weighted mean over the masked positions) + NSP."""
    if case.loss.kind == "mlm_nsp":
        mlm_logits, nsp_logits = model(
            batch["input_ids"], batch["token_type_ids"], batch.get("attention_mask"), batch["mlm_positions"]
        )
        w = ops.as_float(batch["mlm_weights"].reshape(-1))
        mlm = (ops.xent_each(mlm_logits, batch["mlm_ids"]) * w).sum() / (w.sum() + 1e-5)
        return mlm + ops.xent(nsp_logits, batch["nsp_labels"])
    out = model(batch["images"])
    labels = batch["labels"]
    if isinstance(out, tuple):  # a model with an auxiliary head, in training mode: (logits, aux_logits)
        logits, aux = out
        return ops.xent(logits, labels) + case.loss.aux_weight * ops.xent(aux, labels)
    return ops.xent(out, labels)
