"""The keras framework (#46): the same Keras 3 model code on Keras' JAX, TensorFlow and PyTorch backends, each in
its own environment (`dlbench setup keras_jax keras_tf keras_torch`): exact counts, torch's logits with torch's
weights, a loss that falls, one CLI point per backend recording its jit_compile setting, and the refusals.

Keras runs in each environment's interpreter, so this file never imports Keras; torch, the reference, runs here. A
backend whose environment is missing skips, naming it.
"""

from __future__ import annotations

import json
import math
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from dlbench.cases import get_case
from dlbench.cases.llama import llama_arch
from tests.support.frameworks import check_loss_falls, only_point

CliResult = tuple[int, str, str]
BACKENDS = {"keras_jax": "jax", "keras_tf": "tensorflow", "keras_torch": "torch"}
FW = pytest.mark.parametrize(
    "framework_python",
    [pytest.param(n, marks=pytest.mark.framework(n), id=n) for n in BACKENDS],
    indirect=True,
)
pytestmark = pytest.mark.slow

COUNT = """
import json, sys
from dlbench.backends import load_backend
from dlbench.cases import get_case

backend = load_backend(sys.argv[1])
print(json.dumps({name: backend.count_params(get_case(name)) for name in sys.argv[2:]}))
"""

# torch's llama_tiny weights (an .npz of its parameters) into the keras framework's build on its backend, then the
# logits of the same token ids. A Keras kernel is [in, out], torch's weight [out, in]: transposed.
LOGITS = """
import os, sys
import numpy as np
from dlbench.backends import load_backend
os.environ["KERAS_BACKEND"] = sys.argv[3]
from dlbench.cases import get_case

framework, folder = sys.argv[1], sys.argv[2]
load_backend(framework)
import keras
from dlbench.backends.keras.backend import build_model
w = np.load(f"{folder}/weights.npz")
model = build_model(get_case("llama_tiny"), None)
assigned = {}
model.wte.assign(w["wte.weight"]); assigned["wte.weight"] = 1
model.norm.weight.assign(w["norm.weight"]); assigned["norm.weight"] = 1
model.lm_head.kernel.assign(w["lm_head.weight"].T); assigned["lm_head.weight"] = 1
for i, block in enumerate(model.blocks):
    p = f"blocks.{i}"
    for norm in ("attention_norm", "ffn_norm"):
        getattr(block, norm).weight.assign(w[f"{p}.{norm}.weight"]); assigned[f"{p}.{norm}.weight"] = 1
    for part in ("wq", "wk", "wv", "wo"):
        key = f"{p}.attention.{part}.weight"
        getattr(block.attention, part).kernel.assign(w[key].T); assigned[key] = 1
    for part in ("w1", "w2", "w3"):
        key = f"{p}.feed_forward.{part}.weight"
        getattr(block.feed_forward, part).kernel.assign(w[key].T); assigned[key] = 1
assert set(assigned) == set(w.files), sorted(set(w.files) - set(assigned))
logits = model(np.load(f"{folder}/ids.npy").astype("int32"))
np.save(f"{folder}/{framework}.npy", keras.ops.convert_to_numpy(logits))
"""


def _script(python: str, tmp_path: Path, text: str, *args: str) -> str:
    script = tmp_path / "probe.py"
    script.write_text(text)
    proc = subprocess.run([python, str(script), *args], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@FW
def test_exact_counts_on_each_backend(framework_python: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """ResNet-50, BERT-base and the Llama members have their cases' exact counts (torchvision's, HF's, the published
    configurations') on every Keras backend; the 8B is counted without allocating it (keras.StatelessScope)."""
    fw = request.node.callspec.params["framework_python"]
    names = ("resnet50", "bert_base", "llama_tiny", "llama3_8b")
    answer = json.loads(_script(framework_python, tmp_path, COUNT, fw, *names).strip().splitlines()[-1])
    assert answer == {n: get_case(n).param_count for n in names}
    assert answer["resnet50"] == 25_557_032 and answer["llama3_8b"] == 8_030_261_248


@FW
def test_llama_gives_torchs_logits_on_each_backend(
    framework_python: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """With torch's llama_tiny weights the keras framework's model gives the torch backend's logits within 1e-5
    (fp32) on each Keras backend: the one model code computes the same function everywhere."""
    torch = pytest.importorskip("torch", reason="torch (the reference) is not installed: pip install -e '.[torch]'")
    from dlbench.backends.torch.llama import LlamaModel

    torch.manual_seed(0)
    model = LlamaModel(llama_arch(get_case("llama_tiny"))).eval()
    ids = torch.randint(0, get_case("llama_tiny").input.vocab, (2, 16))
    with torch.no_grad():
        want = model(ids).numpy()
    np.savez(tmp_path / "weights.npz", **{k: v.detach().numpy() for k, v in model.named_parameters()})
    np.save(tmp_path / "ids.npy", ids.numpy())
    fw = request.node.callspec.params["framework_python"]
    _script(framework_python, tmp_path, LOGITS, fw, str(tmp_path), BACKENDS[fw])
    got = np.load(tmp_path / f"{fw}.npy")
    assert got.shape == want.shape and float(np.abs(want).max()) > 0.1
    assert np.allclose(got, want, rtol=0, atol=1e-5), float(np.abs(got - want).max())


@FW
def test_llama_tiny_loss_falls(framework_python: str, request: pytest.FixtureRequest) -> None:
    """20 of Keras' own train steps on one fixed batch: every loss finite, the last five's mean below the first."""
    check_loss_falls(framework_python, request.node.callspec.params["framework_python"], "llama_tiny", 16, 2)


@FW
def test_one_point_per_backend_records_its_jit_compile(
    framework_python: str, request: pytest.FixtureRequest, cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    """`dlbench run -f keras_X -m resnet50 --input-size 64`: ok with a finite loss, the Keras backend, its version
    and the jit_compile Keras resolved ("auto": XLA on JAX, eager on PyTorch and on a CPU-only TensorFlow) recorded
    on the point."""
    fw = request.node.callspec.params["framework_python"]
    store = tmp_path / "r.db"
    tiny = ("-b", "2", "--warmup", "1", "--steps", "2", "--repeats", "1", "--threads", "1")
    code, _, err = cli("run", "-f", fw, "-m", "resnet50", "--input-size", "64", *tiny, "--store", str(store))
    assert code == 0, err
    p = only_point(store)
    assert p.status == "ok" and p.metrics is not None, p.error
    assert math.isfinite(p.metrics.final_loss or math.nan)
    assert p.extra["keras_backend"] == BACKENDS[fw] and p.env.identity["framework"] == fw
    # Keras' "auto": XLA on JAX; eager on PyTorch; and on TensorFlow XLA only where a non-CPU device is present.
    assert p.extra["jit_compile"] == ("True" if fw == "keras_jax" else "False")
    assert p.extra["compiled"] == ("xla (jax.jit)" if fw == "keras_jax" else "none")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("-f", "keras_jax", "-m", "resnet50", "--scale", "1n2c"), "keras_jax trains on one device"),
        (("-f", "keras_torch", "-m", "llama_tiny", "--precision", "bf16"), "keras_torch trains in fp32 only"),
        (("-f", "keras", "-m", "resnet50"), "unknown framework 'keras'"),
    ],
)
def test_refused_in_one_line(cli: Callable[..., CliResult], tmp_path: Path, args: tuple[str, ...], words: str) -> None:
    """Before anything runs, exit 2 and one line: several devices, another precision, a Keras backend not named
    keras_jax, keras_tf or keras_torch; the store stays untouched."""
    store = tmp_path / "r.db"
    code, _, err = cli("run", *args, "--store", str(store))
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1, err
    assert not store.exists()
