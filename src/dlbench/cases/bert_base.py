"""BERT-base pre-training: MLM + NSP heads, sequence 128, vocabulary 30522, MLM decoder tied to embeddings; its
smaller members (#44) by parameters, as the compact BERTs of Turc et al. 2019 (BERT-Tiny 2 x 128 ... BERT-Medium
8 x 512): heads of 64 wide and a feed-forward of 4 x hidden, as BERT-base's.

Parameters of a BERT of width h, l layers, a feed-forward f wide, a vocabulary V, P positions and T token types:
``(V + P + T) h + 2 h`` (embeddings and their LayerNorm) ``+ l (4 h^2 + 2 h f + 9 h + f)`` (per layer the fused
query/key/value and the attention output, two LayerNorms, the feed-forward) ``+ 2 h^2 + 6 h + 2 + V`` (the pooler,
the NSP head, the MLM transform and its LayerNorm, the MLM bias; the MLM decoder is the word embedding).
"""

from __future__ import annotations

import dataclasses

from dlbench.cases import Case, CaseParam, Optimizer, TextInput, register
from dlbench.cases.arch import BertConfig, Loss
from dlbench.spec import SpecError

BERT_BASE = BertConfig()
HEAD_SIZE = 64  # heads not given: hidden / 64 of them (BERT-base: 12 at 768, as every compact BERT)
BASE_LR = 1e-4  # BERT-base's Adam learning rate (Devlin et al. 2019, appendix A.2)
BASE_PREDICTIONS = 20  # masked positions predicted per sequence at 128 tokens (Google's recipe: 0.15 x 128, rounded up)
PARAM_NAMES = ("hidden", "layers", "heads", "seq", "vocab")


def param_count(a: BertConfig) -> int:
    """Trainable parameters of BERT for pre-training, from the formula in this module's docstring."""
    h, f = a.hidden_size, a.intermediate_size
    embeddings = (a.vocab_size + a.max_position_embeddings + a.type_vocab_size) * h + 2 * h
    layer = 4 * h * h + 2 * h * f + 9 * h + f
    return embeddings + a.num_layers * layer + 2 * h * h + 6 * h + 2 + a.vocab_size


def learning_rate(hidden: int) -> float:
    """Adam's learning rate at this width: BERT-base's 1e-4 at 768 and wider; a narrower member's scaled by 768 /
    hidden (the inverse-width rule μP gives Adam's hidden weights, Yang et al. 2022): 3e-4 at 256, where
    ELECTRA-Small (12 x 256) pre-trains at 5e-4 (Clark et al. 2020), and 6e-4 at BERT-Tiny's 128."""
    return BASE_LR * max(1.0, BERT_BASE.hidden_size / hidden)


def _shaped(case: Case) -> Case:
    """The member at its parameters: architecture, parameter count, input and learning rate."""
    hidden, layers, heads, seq, vocab = (case.param(n) for n in PARAM_NAMES)
    if "heads" not in dict(case.values):
        heads = max(1, hidden // HEAD_SIZE)
    if hidden % heads:
        raise SpecError(f"case {case.name}: hidden ({hidden}) must be a multiple of heads ({heads}); set --param heads")
    if seq > BERT_BASE.max_position_embeddings:
        raise SpecError(f"case {case.name}: seq must be at most {BERT_BASE.max_position_embeddings} (its positions)")
    shape = {"hidden_size": hidden, "num_layers": layers, "num_heads": heads, "intermediate_size": 4 * hidden}
    arch = dataclasses.replace(BERT_BASE, vocab_size=vocab, **shape)
    predictions = max(1, round(BASE_PREDICTIONS * seq / 128))
    return dataclasses.replace(
        case,
        arch=arch,
        param_count=param_count(arch),
        input=TextInput(seq_len=seq, vocab=vocab, max_predictions=predictions),
        optimizer=dataclasses.replace(case.optimizer, lr=learning_rate(hidden)),
    )


CASE = register(
    Case(
        name="bert_base",
        title="BERT-base",
        task="bert_pretraining",
        input=TextInput(seq_len=128, vocab=30522),
        optimizer=Optimizer("adam", lr=BASE_LR),
        param_count=110_106_428,
        batch_fixed=128,
        batch_cpu=8,
        arch=BERT_BASE,
        loss=Loss("mlm_nsp"),
        aliases=("bert",),
        derive=_shaped,
        params=(
            CaseParam("hidden", 768, "width (BERT-base: 768; the compact BERTs: 128, 256, 512)"),
            CaseParam("layers", 12, "encoder layers (BERT-base: 12; BERT-Tiny: 2)"),
            CaseParam("heads", 12, "attention heads; hidden must be a multiple; not given: hidden / 64"),
            CaseParam("seq", 128, "tokens per sequence (BERT's phase 1: 128; at most its 512 positions)"),
            CaseParam("vocab", 30522, "vocabulary size (uncased WordPiece: 30522)"),
        ),
        notes="A member narrower than BERT-base trains at Adam lr 1e-4 x 768 / hidden (bert_base.learning_rate).",
    )
)

__all__ = ["CASE", "BertConfig", "learning_rate", "param_count"]
