"""What the Llama and MoE framework tests share (#46): torch's llama_tiny and moe_tiny as the reference (their weights,
token ids and logits), a script in a framework's interpreter, every member's count without its weights, a decoder
under --converge through the framework's worker as the controller judges it, and the decoder rows of `dlbench
results` as a user reads them. Each framework's file keeps what is its own: how its model takes torch's weights, its
bounds and what its CLI points say."""

from __future__ import annotations

import json
import math
import subprocess
import textwrap
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dlbench.analysis.convergence import CURVE_KEY, EVAL_KEY, Floor, Judgement, judge
from dlbench.cases import get_case
from dlbench.data.learnable import MARKOV_STATES, MarkovTokens
from dlbench.protocol.converge import Curve
from dlbench.records import PointResult
from dlbench.spec import PointSpec, Protocol
from dlbench.wire import read_result

CliResult = tuple[int, str, str]
REFERENCE = ("llama_tiny", "moe_tiny")
# The CLI's decoder point: 16 tokens, batch 2, a warm-up step and 2 measured steps, one thread.
SMALL = ("--input-size", "16", "-b", "2", "--warmup", "1", "--steps", "2", "--repeats", "1", "--threads", "1")


def run_script(python: str, folder: Path, text: str, *args: str, timeout: float = 600) -> str:
    """Run `text` from folder/script.py (a file: ms.jit reads its functions' source) in a framework's interpreter,
    in folder (a framework's logs stay there); its stdout."""
    script = folder / "script.py"
    script.write_text(textwrap.dedent(text))
    proc = subprocess.run(
        [python, str(script), *args], capture_output=True, text=True, timeout=timeout, check=False, cwd=folder
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


# -- every member's count, without its weights --------------------------------------------------------------------
COUNTS = """
import json, resource, sys
from dlbench.backends import load_backend
from dlbench.cases import get_case

backend = load_backend(sys.argv[1])
out = {n: backend.case_support(get_case(n)) or backend.count_params(get_case(n)) for n in sys.argv[2:]}
out["peak_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""


def member_counts(python: str, folder: Path, framework: str, names: Iterable[str]) -> dict[str, Any]:
    """Each member's trainable parameters as the framework's backend counts them (or its one-line refusal of the
    member), and the counting process's peak resident memory in MiB (`peak_mib`)."""
    out = run_script(python, folder, COUNTS, framework, *names)
    answer: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return answer


# -- the same model as torch's --------------------------------------------------------------------------------------
def torch_reference(folder: Path, parameters_only: bool = False) -> dict[str, np.ndarray]:
    """torch's llama_tiny and moe_tiny as the torch backend builds them (seed 0): each one's weights (NAME.weights.npz,
    its state dict, or with `parameters_only` its parameters without its buffers) and 2 x 16 token ids (NAME.ids.npy)
    written to folder; their fp32 logits on those ids (eval mode) returned. Skips where torch is not installed."""
    torch = pytest.importorskip("torch", reason="torch (the reference) is not installed: pip install -e '.[torch]'")
    from dlbench.backends.torch.llama import LlamaModel
    from dlbench.backends.torch.moe import MoeModel
    from dlbench.cases.llama import llama_arch
    from dlbench.cases.moe import moe_arch

    torch.manual_seed(0)
    models = {
        "llama_tiny": LlamaModel(llama_arch(get_case("llama_tiny"))),
        "moe_tiny": MoeModel(moe_arch(get_case("moe_tiny"))),
    }
    logits = {}
    for name, model in models.items():
        ids = torch.randint(0, get_case(name).input.vocab, (2, 16))
        model.eval()
        with torch.no_grad():
            logits[name] = model(ids).numpy()
        tensors = model.named_parameters() if parameters_only else model.state_dict().items()
        np.savez(folder / f"{name}.weights.npz", **{k: v.detach().numpy() for k, v in tensors})
        np.save(folder / f"{name}.ids.npy", ids.numpy())
    return logits


def assert_same_logits(folder: Path, framework: str, want: dict[str, np.ndarray]) -> None:
    """The logits the framework wrote for each member (NAME.FRAMEWORK.npy) are torch's, within 1e-5 (fp32)."""
    for name, expected in want.items():
        got = np.load(folder / f"{name}.{framework}.npy")
        assert got.shape == expected.shape and float(np.abs(expected).max()) > 0.1, name  # logits of some size
        assert np.allclose(got, expected, rtol=0, atol=1e-5), (name, float(np.abs(got - expected).max()))


# -- learning what only context predicts ----------------------------------------------------------------------------
def halfway_target() -> tuple[float, float]:
    """The Markov source's best context-free loss (the entropy of its stationary distribution, 4.07 nats) and the
    target half-way from it to the entropy rate (2.38), which only a model that reads the previous token reaches;
    both from the source's transition matrix."""
    source = MarkovTokens(MARKOV_STATES)
    context_free = source.unigram_entropy()
    return context_free, round((context_free + source.best_loss) / 2, 3)


@dataclass(frozen=True)
class Converged:
    """A convergence point's curve, the target it trained to, what the data allows and the worker's facts."""

    curve: Curve
    target: float
    floor: Floor
    facts: dict[str, object]

    def evaluation(self) -> dict[str, Any]:
        """The independent evaluation of the point's weights (a fresh process, dlbench/evaluate.py): it ran."""
        found = self.facts[EVAL_KEY]
        assert isinstance(found, dict) and "skipped" not in found, found
        return found

    def judged(self, evaluated: bool = True) -> Judgement:
        """The controller's verdict on the curve, with `evaluated` also on its weights' held-out loss."""
        if not evaluated:
            return judge(self.curve, self.target)
        return judge(self.curve, self.target, evaluation=self.evaluation(), floor=self.floor)


def converge(
    python: str,
    folder: Path,
    framework: str,
    target: float | None,
    steps: int | None,
    model: str = "llama_tiny",
) -> Converged:
    """A decoder under --converge through the framework's worker (batch 8, 16 tokens, one thread), on the learnable
    data; None: the case's own target or budget."""
    spec = PointSpec(
        framework=framework,
        model=model,
        batch_size=8,
        input_size=16,
        threads=1,
        protocol=Protocol(0, 1, 1, "median"),
        converge=True,
        converge_target=target,
        converge_steps=steps,
    )
    (folder / "spec.json").write_text(spec.to_json())
    proc = subprocess.run(
        [python, "-m", "dlbench.worker", str(folder / "spec.json"), str(folder / "result.json")],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = read_result(folder / "result.json")
    assert result.status == "ok", result.error
    assert str(result.facts["loader"]).startswith("learnable")
    raw = result.facts[CURVE_KEY]
    assert isinstance(raw, dict)
    return Converged(
        Curve.from_dict(raw), float(raw["target"]["loss"]), Floor(float(raw["target"]["best"])), result.facts
    )


# -- the decoder points through the CLI ------------------------------------------------------------------------------
def assert_trained(points: Sequence[PointResult]) -> None:
    """Every point trained: ok, with metrics and a finite final loss."""
    for r in points:
        assert r.status == "ok" and r.metrics is not None, r.error
        assert math.isfinite(r.metrics.final_loss or math.nan)


def decoder_rows(
    cli: Callable[..., CliResult], store: Path, keep: Callable[[dict[str, Any]], bool] = lambda row: True
) -> dict[str, dict[str, Any]]:
    """The store's llama_tiny and moe_tiny rows of `dlbench results --format json` (those `keep` keeps), by model,
    read as a user reads them: the Llama family's FLOPs counted with causal attention as half, the MoE's total and
    active parameters (torch's figures), and the routing of its SMALL steps: every token of the warm-up and the 2
    measured steps sent to its top 2 experts in every layer, none dropped."""
    code, out, err = cli("results", "--format", "json", "--store", str(store))
    assert code == 0, err
    rows = {row["spec"]["model"]: row for row in json.loads(out) if keep(row)}
    assert "causal attention counted as half" in rows["llama_tiny"]["llm"]["flop_convention"]
    moe = rows["moe_tiny"]
    assert (moe["llm"]["params_total"], moe["llm"]["params_active"]) == (484_672, 189_760)
    routing = moe["extra"]["routing"]
    per_step = 2 * 16 * 2  # 2 sequences x 16 tokens x top-2
    sums = {sum(layer) for layer in routing["tokens_per_expert"]}
    assert len(sums) == 1 and sums.pop() == per_step * (1 + 2)  # every layer: the warm-up and 2 measured steps
    assert routing["imbalance_max"] >= 1.0 and routing["dropped_fraction"] == 0.0
    return rows
