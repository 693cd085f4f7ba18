"""BERT-base pre-training: MLM + NSP heads, sequence 128, vocabulary 30522, MLM decoder tied to embeddings."""

from dlbench.cases import Case, Optimizer, TextInput, register
from dlbench.cases.arch import BertConfig, Loss

CASE = register(
    Case(
        name="bert_base",
        title="BERT-base",
        task="bert_pretraining",
        input=TextInput(seq_len=128, vocab=30522),
        optimizer=Optimizer("adam", lr=1e-4),
        param_count=110_106_428,
        batch_fixed=128,
        batch_cpu=8,
        arch=BertConfig(),
        loss=Loss("mlm_nsp"),
        aliases=("bert",),
    )
)

__all__ = ["CASE", "BertConfig"]
