"""BERT-base pre-training: MLM + NSP heads, sequence 128, vocabulary 30522, MLM decoder tied to embeddings."""

from dataclasses import dataclass

from dlbench.cases import Case, Optimizer, TextInput, register

CASE = register(Case(
    name="bert_base", title="BERT-base", task="bert_pretraining",
    input=TextInput(seq_len=128, vocab=30522), optimizer=Optimizer("adam", lr=1e-4),
    params=110_106_428, batch_fixed=128, batch_cpu=8, aliases=("bert",),
))


@dataclass(frozen=True)
class BertConfig:
    """BERT-base's architecture, shared by every backend's model (uncased vocabulary)."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    intermediate_size: int = 3072
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    dropout: float = 0.1
    attention_dropout: float = 0.1
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02
    pad_token_id: int = 0
