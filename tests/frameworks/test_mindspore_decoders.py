"""The Llama and MoE families in MindSpore (#46): their exact counts without allocating the big members, the same
model as torch's, llama_tiny learning what only context predicts (judged by an evaluation the training step does
not make), and `dlbench run -f mindspore -m llama_tiny,moe_tiny` as a user types it.

MindSpore runs in its environment's interpreter (a script, or a worker), so this file never imports mindspore;
torch, the reference, runs here. Without the mindspore environment every test skips, naming it (`dlbench setup
mindspore`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from dlbench.backends.decoder import LLAMA_MEMBERS, MOE_MEMBERS
from dlbench.cases import get_case
from dlbench.data.learnable import MARKOV_STATES, MarkovTokens
from tests.support import decoders
from tests.support.frameworks import refused_up_front
from tests.support.scaling import stored

pytestmark = [pytest.mark.framework("mindspore"), pytest.mark.slow]


def test_every_member_has_its_exact_count_without_allocating_it(framework_python: str, tmp_path: Path) -> None:
    """llama3_8b, llama3_1b, mixtral_8x7b (47B) ... counted from the whole model built under MindSpore's
    no_init_parameters (shapes, no weights); each equals the count computed from the published configuration
    (cases/llama.param_count, cases/moe.param_count, themselves checked against Hugging Face's models), and
    the process never held more than a small fraction of the 8B's 32 GB."""
    members = [*LLAMA_MEMBERS, *MOE_MEMBERS]
    assert {"llama3_8b", "llama3_1b", "llama_tiny", "mixtral_8x7b", "moe_tiny"} <= set(members)
    counts = decoders.member_counts(framework_python, tmp_path, "mindspore", members)
    for name in members:
        assert counts[name] == get_case(name).param_count, name
    assert counts["peak_mib"] < 3000, counts["peak_mib"]


SAME_MODEL = """
import sys
import numpy as np, mindspore as ms
from dlbench.backends.mindspore.models import build_model
from dlbench.cases import get_case

folder = sys.argv[1]
for name in sys.argv[2:]:
    torch_weights = np.load(f"{folder}/{name}.weights.npz")
    model = build_model(get_case(name))
    for param in model.trainable_params():
        key = param.name.replace("wte.embedding_table", "wte.weight")
        value = torch_weights[key]  # a Dense weight is [out, in], as torch's
        assert value.shape == tuple(param.shape), (key, value.shape, param.shape)
        param.set_data(ms.Tensor(value.astype("float32")))
    model.set_train(False)
    ids = ms.Tensor(np.load(f"{folder}/{name}.ids.npy").astype("int32"))
    np.save(f"{folder}/{name}.mindspore.npy", model(ids).asnumpy())
"""


def test_llama_and_moe_give_torchs_logits_with_torchs_weights(framework_python: str, tmp_path: Path) -> None:
    """Same weights, same tokens, same logits (fp32): RMSNorm, rotary positions, grouped-query attention, SwiGLU,
    the tied head, and the MoE's top-k routing and dispatch compute what the torch backend's do."""
    want = decoders.torch_reference(tmp_path)
    decoders.run_script(framework_python, tmp_path, SAME_MODEL, str(tmp_path), *decoders.REFERENCE)
    decoders.assert_same_logits(tmp_path, "mindspore", want)


LEARN = """
import sys
import numpy as np
from dlbench.backends.mindspore.backend import MindsporeBackend
from dlbench.backends.mindspore.data import synthetic_batch
from dlbench.cases import get_case
from dlbench.spec import PointSpec, Protocol
from dlbench.wire import RankContext

folder, steps = sys.argv[1], int(sys.argv[2])
spec = PointSpec(framework="mindspore", model="llama_tiny", batch_size=16, input_size=16, compile=True,
                 converge=True, protocol=Protocol(0, 1, 1, "median"))
backend = MindsporeBackend()
trainer = backend.build(spec, get_case("llama_tiny"), RankContext())
for _ in range(steps):
    trainer.train_step(trainer.next_batch())
held_out = np.load(f"{folder}/held_out.npz")
model = trainer.net.model  # the trained decoder, outside its loss Cell
model.set_train(False)
import mindspore as ms
logits = model(ms.Tensor(held_out["input_ids"].astype("int32"))).asnumpy()
np.save(f"{folder}/logits.npy", logits)
print(backend.facts()["loader"])
"""


def test_llama_tiny_learns_what_only_context_predicts(framework_python: str, tmp_path: Path) -> None:
    """After 150 ms.jit steps on the Markov source (--converge's stream, batch 16 x 16 tokens), the trained
    decoder's next-token loss on a held-out batch (another stream of the chain), computed here in numpy from
    its logits, is below the loss of the best context-free predictor (the entropy of the chain's stationary
    distribution, 4.07 nats): only a model that reads the previous token gets there. Neither the figure nor the
    verdict is the training step's own."""
    source = MarkovTokens(MARKOV_STATES)
    held_out = MarkovTokens(MARKOV_STATES, order=12345).batch(0, 32, 16)
    np.savez(tmp_path / "held_out.npz", **held_out)
    decoders.run_script(framework_python, tmp_path, LEARN, str(tmp_path), "150", timeout=900)
    logits = np.load(tmp_path / "logits.npy").astype(np.float64)
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    labels = held_out["labels"]
    nll = float(-np.take_along_axis(log_probs, labels[..., None], -1).mean())
    context_free = source.unigram_entropy()
    assert source.best_loss < nll < context_free, (nll, context_free, source.best_loss)


def test_llama_and_moe_through_the_cli(
    framework_python: str, cli: Callable[..., decoders.CliResult], tmp_path: Path
) -> None:
    """`dlbench run -f mindspore -m llama_tiny,moe_tiny`: both train (llama_tiny in an ms.jit graph), with their
    exact counts, their FLOPs by the family's convention (the torch points' figures, so MFU is counted alike), the
    MoE's total and active parameters and its routing; --compile of the MoE is refused in one line."""
    store = tmp_path / "r.db"
    code, out, err = cli(
        "run", "-f", "mindspore", "-m", "llama_tiny", "--compile", *decoders.SMALL, "--store", str(store)
    )
    assert code == 0, err
    code, out2, err = cli("run", "-f", "mindspore", "-m", "moe_tiny", *decoders.SMALL, "--store", str(store))
    assert code == 0, err
    assert "6N+attn/2" in out and "6Nact+attn/2" in out2
    points = {r.spec.model: r for r in stored(store)}
    assert sorted(points) == ["llama_tiny", "moe_tiny"]
    decoders.assert_trained(list(points.values()))
    assert points["llama_tiny"].extra["compiled"] == "ms.jit (graph mode)"
    decoders.decoder_rows(cli, store)
    refused_up_front(cli, store, ("-f", "mindspore", "-m", "moe_tiny", "--compile", *decoders.SMALL), "static shapes")
