"""The framework release as an axis of points (#49): `-f jax==0.10.1` makes a point that asks for that release, whose
key keeps a point stored before the field; the fake backend's planted slowdown (`slow@RELEASE:FACTOR`)."""

from __future__ import annotations

import pytest

from dlbench.backends.fake import FakeBackend, slowdown
from dlbench.cases import get_case
from dlbench.cli.values import as_frameworks
from dlbench.points import Axes, Shared, point, points
from dlbench.spec import PointSpec, SpecError, split_release


def test_a_framework_may_name_its_release() -> None:
    assert split_release("jax==0.10.1") == ("jax", "0.10.1")
    assert split_release(" torch ") == ("torch", None)
    for bad in ("jax=0.10.1", "jax==", "jax==v1", "jax==1.0;rm"):
        with pytest.raises(SpecError):
            split_release(bad)
    assert as_frameworks("fake==1.0,fake==2.0").names == ("fake==1.0", "fake==2.0")


def test_a_point_records_the_release_it_asks_for_and_old_keys_stay() -> None:
    plain = point("fake", "resnet50", 2, "fp32", Shared())
    versioned = point("fake==2.0", "resnet50", 2, "fp32", Shared())
    assert plain.release is None and versioned.release == "2.0" and versioned.framework == "fake"
    assert versioned.framework_label == "fake==2.0" and plain.framework_label == "fake"
    assert '"release"' not in plain.key() and '"release": "2.0"' in versioned.key()
    assert PointSpec.from_json(versioned.to_json()) == versioned
    with pytest.raises(SpecError, match="its release goes in `release`"):
        PointSpec(framework="fake==2.0", model="resnet50", batch_size=1, protocol=Shared().protocol)
    specs = points(Axes(frameworks=("fake==1.0", "fake==2.0"), models=("resnet50",)), Shared())
    assert [s.release for s in specs] == ["1.0", "2.0"]


def test_the_fake_slowdown_applies_from_its_release_on() -> None:
    setting = "sleep:0.02,slow@2.0:1.3"
    assert slowdown("1.9", setting) == (1.0, "sleep:0.02")
    assert slowdown("2.0", setting)[0] == pytest.approx(1.3)
    assert slowdown("2.10", setting)[0] == pytest.approx(1.3)  # 2.10 is after 2.9, not before 2.2
    assert slowdown(None, setting)[0] == 1.0
    assert slowdown("3.0", "slow@2.0:1.3,slow@3.0:0.5")[0] == pytest.approx(0.65)
    spec = point("fake==2.0", "resnet50", 2, "fp32", Shared())
    assert FakeBackend().environment(spec)["framework_version"] == "2.0"


def test_the_fake_trainer_takes_the_planted_step_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLBENCH_FAKE", "sleep:0.01,slow@2.0:1.3")
    case = get_case("resnet50")
    old = FakeBackend().build(point("fake==1.0", case, 2, "fp32", Shared()), case, None)  # type: ignore[arg-type]
    new = FakeBackend().build(point("fake==2.0", case, 2, "fp32", Shared()), case, None)  # type: ignore[arg-type]
    assert old.step_s == pytest.approx(0.01) and new.step_s == pytest.approx(0.013)  # type: ignore[attr-defined]
