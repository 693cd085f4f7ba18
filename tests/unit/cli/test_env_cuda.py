"""`dlbench env --device cuda` (#40), the GPU validation's first step: where NVML or the framework shows no GPU it
exits 2 and names the cause (it printed the CPU's environment and exited 0, so a GPU run was lost silently); with
a GPU (NVML faked at its boundary) it shows it and exits 0."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest

from tests.support import fake_pynvml

CliResult = tuple[int, str, str]
H200 = fake_pynvml.FakeGpu("GPU-h200-0", name="NVIDIA H200", total=141 * 2**30, compute_capability=(9, 0))


def test_no_nvml_library_is_named(monkeypatch: pytest.MonkeyPatch, cli: Callable[..., CliResult]) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # nvidia-ml-py missing
    code, _, err = cli("env", "--device", "cuda", "--framework", "fake")
    assert code == 2 and "--device cuda: NVML cannot be loaded (ModuleNotFoundError" in err and err.count("\n") == 1, (
        err
    )


def test_gpus_hidden_are_named(monkeypatch: pytest.MonkeyPatch, cli: Callable[..., CliResult]) -> None:
    fake_pynvml.install(monkeypatch, [H200], visible="")
    code, _, err = cli("env", "--device", "cuda", "--framework", "fake")
    assert code == 2 and "CUDA_VISIBLE_DEVICES='' hides every GPU NVML sees" in err, err


def test_a_gpu_shown_passes_and_a_framework_that_sees_none_is_named(
    monkeypatch: pytest.MonkeyPatch, cli: Callable[..., CliResult]
) -> None:
    fake_pynvml.install(monkeypatch, [H200])
    code, out, err = cli("env", "--device", "cuda", "--framework", "fake")
    assert code == 0 and "NVIDIA H200" in out, err
    code, _, err = cli("env", "--device", "cpu")
    assert code == 0, err
    pytest.importorskip("torch", reason="torch is not installed in this environment")
    code, out, err = cli("env", "--device", "cuda")  # torch by default: a CPU build here, which sees no GPU
    assert code == 2 and "NVIDIA H200" in out and "--device cuda: torch: " in err and err.count("\n") == 1, err
