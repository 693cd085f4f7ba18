"""Run in the JAX environment: `python jax_dit_probe.py WEIGHTS.npz`. Loads torch's DiT weights and inputs (written
by test_jax_dit.py from the torch backend's model) into the JAX transformer, and prints one JSON line: the JAX
model's parameter counts (dit_tiny's shape, FLUX.1-schnell's, with the guidance embedding), the largest difference
of its velocity from torch's on the same inputs, whether its output starts at zero and its target is the drawn
noise minus the latents, and the losses of a few steps on the learnable latent templates."""

from __future__ import annotations

import json
import sys

PARAMS = {"double": 1, "single": 1, "side": 8, "text_tokens": 8}


def _tree(weights: dict[str, object]) -> dict[str, object]:
    """torch's state dict (names with dots, Linear weights [out, in]) as the flax parameter tree."""
    import numpy as np

    tree: dict[str, object] = {}
    for name, value in weights.items():
        parts = name.split(".")
        if parts[0] in ("double_blocks", "single_blocks"):
            parts = [f"{parts[0].split('_')[0]}_{parts[1]}", *parts[2:]]
        leaf = parts[-1]
        array = np.asarray(value)
        if leaf == "weight" and array.ndim == 2:
            parts[-1], array = "kernel", array.T
        elif leaf == "weight":
            parts[-1] = "scale"
        node = tree
        for p in ["transformer", *parts[:-1]]:
            node = node.setdefault(p, {})  # type: ignore[assignment]
        node[parts[-1]] = array  # type: ignore[index]
    return tree


def main() -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from dlbench.backends.jax.backend import JaxBackend, count_leaves
    from dlbench.backends.jax.dit import DitModel, Transformer, draws, patchify
    from dlbench.cases import get_case
    from dlbench.cases.dit import dit_arch
    from dlbench.spec import PointSpec, Protocol
    from dlbench.wire import RankContext

    jax.config.update("jax_default_matmul_precision", "highest")
    saved = dict(np.load(sys.argv[1]))
    inputs = {k: saved.pop(k) for k in ("xt", "t", "text", "pooled", "velocity")}
    case = get_case("dit_tiny").configured(PARAMS)
    cfg = dit_arch(case)
    backend = JaxBackend()
    out: dict[str, object] = {
        "params": backend.count_params(case),
        "flux1": backend.count_params(get_case("flux1")),
        "flux1_dev": backend.count_params(get_case("flux1").configured({"guidance": 1})),
    }
    params = _tree(saved)
    # jitted: one XLA compile of the whole graph, not one per operation as eagerly (a minute under load, #48)
    velocity = jax.jit(Transformer(cfg).apply)(
        {"params": params["transformer"]}, *(inputs[k] for k in ("xt", "t", "text", "pooled"))
    )
    out["max_abs_diff"] = float(np.abs(np.asarray(velocity) - inputs["velocity"]).max())
    out["velocity_scale"] = float(np.abs(inputs["velocity"]).max())
    model = DitModel(cfg)
    key = jax.random.PRNGKey(5)
    latents = jnp.asarray(np.random.default_rng(0).standard_normal((2, 16, 8, 8), dtype=np.float32))
    text, pooled = inputs["text"][:2], inputs["pooled"][:2]
    init = jax.jit(lambda k: model.init({"params": k, "dropout": k}, latents, text, pooled))(key)
    pred, target = jax.jit(lambda v, k: model.apply(v, latents, text, pooled, rngs={"dropout": k}))(init, key)
    used = model.apply(init, rngs={"dropout": key}, method=lambda m: m.make_rng("dropout"))  # __call__'s first key
    _, noise = draws(cfg, used, latents)
    out["starts_at_zero"] = bool(jnp.abs(pred).max() == 0)
    out["target_ok"] = bool(jnp.allclose(target, patchify(noise - latents, cfg.patch)))
    out["init_params"] = count_leaves(init["params"])
    spec = PointSpec(
        framework="jax",
        model="dit_tiny",
        batch_size=8,
        protocol=Protocol(0, 1, 1, "median"),
        converge=True,
        threads=1,
        case_params=tuple(sorted(PARAMS.items())),
    )
    trainer = backend.build(spec, case, RankContext())
    losses = []
    for _ in range(40):
        trainer.train_step(trainer.next_batch())
        losses.append(trainer.loss())
    out["losses"] = losses
    out["facts"] = backend.facts()["dit"]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
