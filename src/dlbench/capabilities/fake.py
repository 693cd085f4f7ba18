"""What the fake (test double) backend runs, framework-free (dlbench.capabilities): any strategy the spec names,
every precision (fp8 on a GPU, as torch: the GPU validation's rehearsal runs its fp8 step), no split model
(backends/fake.py). Its refusal of --compile is left to its worker on purpose: tests use it to reach the
worker-side `unsupported` status, which facts only a framework knows still produce."""

from __future__ import annotations

from dlbench.capabilities import ALL_PRECISIONS, Capabilities

CAPABILITIES = Capabilities(
    framework="fake",
    any_strategy=True,
    numerics_policy=False,  # it computes nothing: every precision "runs" on every device
    precisions=(("cpu", ALL_PRECISIONS), ("cuda", (*ALL_PRECISIONS, "fp8"))),
    layout_why="the fake backend does not split a model: use --tensor-parallel 1 --pipeline-parallel 1",
)
