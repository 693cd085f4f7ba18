"""What `--converge` trains to, per kind of case (issue #34): the learnable data, the target loss, the step budget
and how often the curve is read; and which frameworks and precisions have a target at all.

The targets are checks of correctness on data made to be learnable (data/learnable.py), not quality figures: a
ResNet-50 that reaches 0.25 on ten separable template classes at 32 px says its step trains, nothing about ImageNet
accuracy. Every target sits above the data's best possible loss (`best_loss`), so it can be reached by construction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dlbench.cases import Case, TextInput, get_case
from dlbench.cases.arch import DlrmArch
from dlbench.cases.lora import FINETUNE_MARGIN, SHIFTED_ROWS, lora_of
from dlbench.spec import PointSpec

CONVERGE_FRAMEWORKS: tuple[str, ...] = (
    "torch",
    "jax",
    "mindspore",
    "jittor",
    "fake",
    "paddle",
    "oneflow",
    "tf",
    "mxnet",
    "megengine",
)  # backends that feed the learnable data
# Backends whose learnable data is checked for some kinds of case only (#46): their other cases are refused.
CONVERGE_TASKS: dict[str, tuple[str, ...]] = {
    "mindspore": ("causal_lm", "image_classification"),
    "jittor": ("causal_lm", "image_classification"),
    "paddle": ("causal_lm", "image_classification"),
    "oneflow": ("causal_lm", "image_classification"),
    "tf": ("causal_lm", "image_classification"),
    "mxnet": ("image_classification",),
    "megengine": ("image_classification",),
}
# Backends whose convergence points train on one device only: their multi-device trainers draw no learnable data.
CONVERGE_ONE_DEVICE: tuple[str, ...] = ("tf", "mxnet")
CONVERGE_PRECISIONS: tuple[str, ...] = ("fp32", "bf16")
REFERENCE_RUNS = 5  # local reference runs per configuration (torch fp32, one device), as many as a shipped point
REFERENCE_SEED0 = 100  # their seeds, and the shipped points': 100 .. 100 + N - 1 (a candidate's default is 0)
BERT_BELOW_UNIGRAM = 0.5  # nats below the unigram entropy: BERT's target uses its neighbours
CTR_ABOVE_BAYES = 0.1  # nats above the planted logistic's Bayes loss: Wide & Deep's target loss
CTR_AUC = 0.88  # the held-out AUC Wide & Deep's weights must show in the independent evaluation
MAX_STEPS = 100_000  # a step budget at most 100 x the cases' own (1,000): a flat curve must end, not train for days


@dataclass(frozen=True)
class Target:
    """A case's convergence target: the loss to reach, within `budget` steps, read every `every` steps."""

    loss: float
    budget: int
    every: int
    data: str
    best_loss: float
    auc: float | None = None  # where set, the run is judged by its held-out AUC reaching this (DLRM, as MLPerf)
    best_auc: float | None = None
    eval_auc: float | None = None  # the AUC the independent evaluation of its weights must show (Wide & Deep)

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-able dict."""
        out: dict[str, object] = {
            "loss": self.loss,
            "budget": self.budget,
            "every": self.every,
            "data": self.data,
            "best": self.best_loss,
        }
        if self.auc is not None:
            out.update(auc=self.auc, best_auc=self.best_auc)
        if self.eval_auc is not None:
            out.update(eval_auc=self.eval_auc)
        return out


AUC_MARGIN = 0.02  # a DLRM's AUC target: the planted truth's own AUC on the held-out set less this


def _dlrm_target(a: DlrmArch, budget: int | None, auc: float | None) -> Target:
    """A DLRM's target: the held-out AUC of the planted clicks less AUC_MARGIN (`auc` replaces it)."""
    from dlbench.data.recsys import PlantedClicks  # NumPy: only where a target is asked, not on a point's path

    source = PlantedClicks(a)
    best_loss, best_auc = source.best_loss(), source.best_auc()
    return Target(
        loss=round(best_loss + 0.05, 3),
        budget=1000 if budget is None else budget,
        every=10,
        data="planted-logistic clicks (data/recsys.py), held-out AUC",
        best_loss=best_loss,
        auc=round(best_auc - AUC_MARGIN, 3) if auc is None else auc,
        best_auc=best_auc,
    )


def target_for(case: Case, budget: int | None = None, loss: float | None = None) -> Target | None:
    """The case's target (a step budget or a loss given on the command line replace its own), or None where its
    kind of case has no learnable data wired yet. A DLRM is judged by AUC: `loss` then sets its AUC target."""
    from dlbench.data.latents import LATENT_TEMPLATES  # NumPy: only where a target is asked
    from dlbench.data.learnable import HELD_OUT, IMAGE_CLASSES, MARKOV_STATES, MarkovTokens, PlantedCtr

    if isinstance(case.arch, DlrmArch):
        return _dlrm_target(case.arch, budget, loss)
    if case.task == "image_classification":
        own = Target(0.25, 1000, 10, f"{IMAGE_CLASSES} separable template classes + noise", 0.0)
    elif case.task == "causal_lm" and lora_of(case) is not None:  # fine-tuning a pretrained base (#47)
        best = MarkovTokens(states=MARKOV_STATES, shifted=SHIFTED_ROWS).best_loss
        data = f"Markov source, {MARKOV_STATES} tokens, {SHIFTED_ROWS} rows shifted from the pretraining chain"
        own = Target(round(best + FINETUNE_MARGIN, 3), 1000, 10, data, best)
    elif case.task == "causal_lm":
        best = MarkovTokens(states=MARKOV_STATES).best_loss
        own = Target(round(best + 0.25, 3), 1000, 10, f"Markov source, {MARKOV_STATES} tokens", best)
    elif case.task == "text_to_image":  # flow matching on latents the text determines: best 0, blind about 1.9
        own = Target(0.5, 1000, 10, f"{LATENT_TEMPLATES} latent templates named by their text embeddings", 0.0)
    elif case.task == "bert_pretraining":
        tokens = MarkovTokens(states=MARKOV_STATES)
        best = tokens.two_sided_entropy()
        # Beyond the unigram level: below what any model that ignores its neighbours can reach.
        own = Target(round(tokens.unigram_entropy() - BERT_BELOW_UNIGRAM, 3), 1000, 10, "masked Markov source", best)
    elif case.task == "ctr":
        best = PlantedCtr(order=HELD_OUT).best_loss
        data = "planted logistic click-through, held-out AUC checked"
        own = Target(round(best + CTR_ABOVE_BAYES, 3), 1000, 10, data, best, eval_auc=CTR_AUC)
    else:
        return None
    return Target(
        own.loss if loss is None else loss,
        own.budget if budget is None else budget,
        own.every,
        own.data,
        own.best_loss,
        eval_auc=own.eval_auc,
    )


def convergence_refusal(spec: PointSpec) -> str | None:
    """Why a --converge point cannot run (one line), or None: a framework, precision or case without a target, a
    step budget below one, a target below the data's best possible loss."""
    if not spec.converge:
        return None
    if spec.framework not in CONVERGE_FRAMEWORKS:
        return (
            f"--converge has no learnable data wired for {spec.framework} yet (wired: {', '.join(CONVERGE_FRAMEWORKS)})"
        )
    tasks, task = CONVERGE_TASKS.get(spec.framework), get_case(spec.model).task
    if tasks is not None and task not in tasks:
        return f"--converge is wired for {spec.framework}'s {', '.join(tasks)} cases only, not {spec.model} ({task})"
    if spec.framework in CONVERGE_ONE_DEVICE and spec.global_batch != spec.batch_size:
        return f"--converge is wired for {spec.framework} on one device only (its multi-device trainers draw no learnable data)"
    if spec.precision not in CONVERGE_PRECISIONS:
        return f"--converge has no target for {spec.precision} (targets exist for {', '.join(CONVERGE_PRECISIONS)})"
    return _vocab_problem(spec) or target_problem(spec.model, spec.converge_steps, spec.converge_target)


def _vocab_problem(spec: PointSpec) -> str | None:
    """Why a language model's vocabulary cannot hold the Markov source's token ids (and BERT's [MASK]), or None."""
    from dlbench.data.learnable import MARKOV_STATES

    case = get_case(spec.model).configured(spec.params)
    if not isinstance(case.input, TextInput) or case.task not in ("causal_lm", "bert_pretraining"):
        return None
    need = MARKOV_STATES + (case.task == "bert_pretraining")  # BERT's [MASK] is the id after the chain's tokens
    if case.input.vocab >= need:
        return None
    ids = f"0..{need - 1} ({MARKOV_STATES} Markov tokens{' and [MASK]' if need > MARKOV_STATES else ''})"
    return (
        f"--converge feeds {spec.model} the token ids {ids}: its vocab must be at least {need}; got {case.input.vocab}"
    )


def target_problem(model: str, steps: int | None, loss: float | None, options: bool = True) -> str | None:
    """Why a model cannot train to this step budget and target loss (one line), or None: a case without a target,
    a budget below one step or above MAX_STEPS, a target that is not finite or at or below the data's best
    possible loss. `options`: worded for `run`'s
    options (--converge-steps), else for a suite's `converge:` keys (steps)."""
    case = get_case(model)
    target = target_for(case)
    flags = ("--converge has", "--converge-steps", "--converge-target")
    what, steps_name, loss_name = flags if options else ("there is", "steps", "target")
    if target is None:
        return (
            f"{what} no target for {case.name} ({case.task}): image classifiers, decoders, BERT, Wide & Deep, DLRM "
            "and DiTs have one"
        )
    if steps is not None and steps < 1:
        return f"{steps_name} must be at least 1; got {steps}"
    if steps is not None and steps > MAX_STEPS:
        return f"{steps_name} must be at most {MAX_STEPS:,} (the cases' own budget is {target.budget:,}); got {steps:,}"
    if loss is not None and not math.isfinite(loss):
        return f"{loss_name} must be a finite number; got {loss}"
    if target.best_auc is not None and loss is not None:
        if not 0.5 < loss < target.best_auc:
            return (
                f"{loss_name} {loss:g} is {case.name}'s AUC target: it must lie above 0.5 (a coin) and below the "
                f"planted truth's own held-out AUC ({target.best_auc:.4g})"
            )
        return None
    if loss is not None and loss < target.best_loss + 1e-9:
        return (
            f"{loss_name} {loss:g} is at or below the best possible loss of {case.name}'s learnable "
            f"data ({target.best_loss:.4g}, {target.data}): it cannot be reached"
        )
    return None
