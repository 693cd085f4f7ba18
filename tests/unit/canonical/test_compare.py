"""The same-model comparison: relative differences, tolerances, the worst tensor named, and a deviation that only
excuses the difference it predicts."""

from __future__ import annotations

import math

import numpy as np

from dlbench.canonical.compare import TOLERANCES, compare, l2_relative, max_relative
from dlbench.canonical.deviations import biased_variance
from dlbench.samemodel import verdict

RNG = np.random.default_rng(0)


def _files(n: int = 8) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Canonical weights and a torch result: logits, loss, and the changes of a conv weight and a running var."""
    w = {"conv.weight": RNG.standard_normal((4, 3)).astype(np.float32), "bn.running_var": np.full(4, 1.0, np.float32)}
    batch_var = RNG.uniform(0.5, 2.0, 4)
    ref = {
        "out/logits": RNG.standard_normal((2, 10)).astype(np.float32),
        "out/logits_eval": RNG.standard_normal((2, 10)).astype(np.float32),
        "loss": np.asarray(2.5),
        "delta/conv.weight": RNG.standard_normal((4, 3)).astype(np.float32),
        "delta/bn.running_var": (0.1 * (batch_var * n / (n - 1) - 1.0)).astype(np.float32),
    }
    return w, ref


def test_relative_differences() -> None:
    b = np.array([1.0, -2.0, 4.0])
    assert math.isclose(max_relative(b + np.array([0.0, 0.0, 0.4]), b), 0.1)
    assert math.isclose(l2_relative(b * 1.01, b), 0.01)
    assert max_relative(b[:2], b) == math.inf and max_relative(b * np.nan, b) == math.inf
    assert l2_relative(np.zeros(3), np.zeros(3)) == 0.0 and l2_relative(np.ones(3), np.zeros(3)) == math.inf


def test_the_same_results_pass_and_a_changed_tensor_fails_naming_it() -> None:
    w, ref = _files()
    same = compare("jax", w, ref, dict(ref))
    assert same.passed and same.failure() == "" and same.step.value == 0.0 and same.precision == "float32"
    got = dict(ref, **{"delta/conv.weight": ref["delta/conv.weight"] * 1.01})
    c = compare("jax", w, ref, got)
    assert not c.passed and c.step.worst == "conv.weight" and c.step.value > TOLERANCES["float32"].step
    assert "conv.weight" in c.failure() and "float32 step" in c.failure()
    logits = compare("jax", w, ref, dict(ref, **{"out/logits": ref["out/logits"] * 1.001}))
    assert not logits.passed and "float32 logits" in logits.failure() and logits.eval_logits.passed


def test_the_float64_run_is_judged_where_both_have_one_with_its_tighter_tolerances() -> None:
    w, ref = _files()
    noisy = dict(ref, **{"delta/conv.weight": ref["delta/conv.weight"] * 1.1})  # a chaotic float32 step
    noisy["out/logits"] = ref["out/logits"] * 1.01  # and forward
    c = compare("jax", w, ref, noisy, ref64=dict(ref), got64=dict(ref))
    assert c.passed and c.precision == "float64" and c.logits.value == 0.0
    assert c.float32_logits.value is not None and c.float32_logits.value > 0.009  # shown, not judged
    near = dict(ref, **{"out/logits": ref["out/logits"] * (1 + 1e-5)})  # within float32's 1e-4, not float64's
    assert compare("jax", w, ref, near).passed
    assert not compare("jax", w, ref, dict(ref), ref64=dict(ref), got64=near).passed


def test_a_deviation_excuses_only_the_difference_it_predicts() -> None:
    w, ref = _files(n=8)
    var = 1.0 + ref["delta/bn.running_var"] / 0.1  # torch's unbiased batch variance
    biased = dict(ref, **{"delta/bn.running_var": (0.1 * (var * 7 / 8 - 1.0)).astype(np.float32)})
    c = compare("jax", w, ref, biased)
    assert c.passed and [(d.deviation.name, d.worst) for d in c.covered] == [("biased-running-var", "bn.running_var")]
    assert not compare("torch2", w, ref, biased).passed  # a framework the deviation does not name
    wrong = dict(ref, **{"delta/bn.running_var": ref["delta/bn.running_var"] * 0.5})  # another momentum
    c = compare("jax", w, ref, wrong)
    assert not c.passed and c.step.worst == "bn.running_var" and not c.covered


def test_biased_variance_names_what_it_is_not() -> None:
    w0 = np.ones(4)
    ref = 0.1 * (np.array([1.5, 0.7, 2.0, 1.2]) - 1.0)
    assert biased_variance(w0, ref, ref) is not None  # equal: not a biased variance
    assert "no one multiple" in str(biased_variance(w0, ref, 0.5 * ref))  # another momentum
    got = 0.1 * ((1.0 + ref / 0.1) * 0.95 - 1.0)  # 0.95 = (n - 1) / n for n = 20
    assert biased_variance(w0, ref, got) is None
    got = 0.1 * ((1.0 + ref / 0.1) * 0.93 - 1.0)  # n = 14.28...: no whole n
    assert "no whole n" in str(biased_variance(w0, ref, got))


def _scaled(ref: dict[str, np.ndarray], **factors: float) -> dict[str, np.ndarray]:
    """`ref` with the named entries ('out/logits' as out_logits, 'delta/conv.weight' as delta_conv) scaled."""
    keys = {"out_logits": "out/logits", "out_eval": "out/logits_eval", "delta_conv": "delta/conv.weight"}
    return dict(ref, **{keys[k]: (ref[keys[k]] * np.float32(f)).astype(np.float32) for k, f in factors.items()})


def test_a_float32_run_is_inconclusive_only_where_torch_own_float32_fails_too() -> None:
    w, ref = _files()
    torch32 = _scaled(ref, out_logits=1 + 1.3e-4, delta_conv=1.08)  # torch's float32 against its float64 (ref)
    own = compare("torch", w, ref, torch32)
    chaotic = _scaled(ref, out_logits=1 + 5e-4, delta_conv=1.1)
    status, note = verdict(compare("megengine", w, ref, chaotic), own, "no float64 kernels")
    assert status == "inconclusive", note
    assert "logits, step fail" in note and "(logits 1.3e-04, step 8.0e-02)" in note and "no float64 kernels" in note
    steady = compare("torch", w, ref, dict(ref))  # a case float32 can judge: the same difference fails
    assert verdict(compare("megengine", w, ref, chaotic), steady, "none")[0] == "fail"
    judgeable = _scaled(ref, out_logits=1 + 5e-4, out_eval=1.01)  # the eval logits, which torch's float32 holds
    status, note = verdict(compare("megengine", w, ref, judgeable), own, "none")
    assert status == "fail" and note.endswith("float32 cannot judge logits here, but eval logits fail"), note
    assert verdict(compare("megengine", w, ref, dict(ref)), own, "none")[0] == "pass"
    f64 = compare("oneflow", w, ref, dict(ref), ref, _scaled(ref, delta_conv=1.1))
    assert verdict(f64, own, "") == ("fail", f64.failure())  # a float64 run is judged as it is
