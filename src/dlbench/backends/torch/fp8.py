"""`--precision fp8` in torch: torchao's float8 training (the `dlbench[fp8]` extra), as torchtitan runs it.

Every ``nn.Linear`` whose dimensions are multiples of 16 (the FP8 GEMM's alignment) becomes torchao's
``Float8Linear`` except the LM head (torchtitan's default, for the loss's accuracy): its input, weight and output
gradient are cast to float8 (e4m3 forward, e5m2 for gradients) with dynamic scales, `tensorwise` (one scale per
tensor) or `rowwise` (one per row); the rest of the model runs under bfloat16 autocast. On GPUs the FP8 GEMMs run
on FP8 tensor cores (sm_89 and later); `emulate` runs the same casts and scales with high-precision GEMMs, so that
this CPU tests the conversion.
"""

from __future__ import annotations

import dataclasses
import importlib.util

from torch import nn

RECIPES: tuple[str, ...] = ("tensorwise", "rowwise")
SKIPPED = ("lm_head",)  # the vocabulary projection stays bfloat16
MIN_SM = (8, 9)


def refusal(capability: tuple[int, int] | None) -> str | None:
    """Why fp8 cannot train here (one line), or None: torchao missing, or a GPU of compute capability below 8.9."""
    if importlib.util.find_spec("torchao") is None:
        return "fp8 trains through torchao's float8 training, which is not installed: pip install 'dlbench[fp8]'"
    if capability is not None and capability < MIN_SM:
        return (
            f"fp8 needs FP8 tensor cores (NVIDIA sm_89 and later: Ada, Hopper, Blackwell); this GPU is "
            f"sm_{capability[0]}{capability[1]}: use --precision bf16"
        )
    return None


def _eligible(module: nn.Module, fqn: str) -> bool:
    """Whether a module becomes a Float8Linear: a Linear, aligned to 16, not the LM head."""
    if not isinstance(module, nn.Linear) or any(fqn.endswith(s) for s in SKIPPED):
        return False
    return module.in_features % 16 == 0 and module.out_features % 16 == 0


def convert(model: nn.Module, recipe: str = "tensorwise", emulate: bool = False) -> dict[str, object]:
    """Swap the model's eligible linear layers for Float8Linear in place; what was done, for the point's facts."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    if recipe not in RECIPES:
        raise ValueError(f"fp8 recipe must be one of {', '.join(RECIPES)}; got {recipe!r}")
    config = dataclasses.replace(Float8LinearConfig.from_recipe_name(recipe), emulate=emulate)
    convert_to_float8_training(model, config=config, module_filter_fn=_eligible)
    converted = sorted(name for name, m in model.named_modules() if type(m).__name__ == "Float8Linear")
    import torchao

    return {
        "library": f"torchao {torchao.__version__} float8 training",
        "scaling": recipe,
        "emulated": emulate,
        "float8_linears": len(converted),
        "kept_bf16": list(SKIPPED),
        "formats": "e4m3 forward, e5m2 gradients, dynamic scales",
    }


__all__ = ["MIN_SM", "RECIPES", "SKIPPED", "convert", "refusal"]
