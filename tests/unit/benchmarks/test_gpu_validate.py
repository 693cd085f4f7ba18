"""benchmarks/gpu/validate.sh: its out-of-memory step fails for memory alone."""

from __future__ import annotations

import re

from tests.support.paths import REPO


def test_validate_oom_step_is_too_big_for_memory_only() -> None:
    """benchmarks/gpu/validate.sh's OOM step (stage b) must fail for memory alone: its batch's ResNet-50 fp32
    activations (about 100 MB an image) pass an H200's 141 GB, while its largest tensor (64 x 112 x 112 = 256 x 56 x
    56 values an image) stays under 2^31 elements (8192 made 6.6e9); the run and its check name the same batch."""

    script = (REPO / "benchmarks" / "gpu" / "validate.sh").read_text(encoding="utf-8")
    step = script[script.index("stage_b() {") : script.index("stage_c() {")]
    given = re.search(r"run .*-m resnet50 -p fp32 -b (\d+) ", step)
    assert given is not None
    batch = int(given.group(1))
    assert f'check "batch {batch} is oom"' in step
    assert batch * 64 * 112 * 112 < 2**31
    assert batch * 100e6 > 141e9
