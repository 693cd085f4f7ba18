"""BERT-base pre-training: MLM + NSP heads, sequence 128, vocabulary 30522, MLM decoder tied to embeddings."""

from dlbench.cases import Case, Optimizer, TextInput, register

CASE = register(Case(
    name="bert_base", title="BERT-base", task="bert_pretraining",
    input=TextInput(seq_len=128, vocab=30522), optimizer=Optimizer("adam", lr=1e-4),
    params=110_106_428, batch_fixed=128, batch_cpu=8, aliases=("bert",),
))
