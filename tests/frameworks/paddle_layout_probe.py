"""Run in the Paddle environment: one rank of a Paddle decoder point, built by the Paddle backend as a worker builds
it (its rank variables, fleet.init, the strategy's wrappers), trained STEPS AdamW steps on its slice of one global
batch; writes {losses, checksum, facts} as JSON. `world` 1 is the one-device run on the whole global batch.

    python paddle_layout_probe.py MODEL STRATEGY WORLD RANK PORT OUT.json

The MoE's auxiliary loss is switched off here (its batch-wise term is not linear in the batch, so the ranks' mean
would differ from one device's by that term alone); dropless routing makes the rest exact.
"""

from __future__ import annotations

import dataclasses
import json
import sys

# Tiny shapes (2 shared cores): llama_tiny's family with 2 layers, grouped-query attention kept (4 heads, 2 kv).
PARAMS: dict[str, dict[str, int]] = {
    "llama_tiny": {"hidden": 32, "layers": 2, "heads": 4, "kv_heads": 2, "ffn": 64, "vocab": 128, "seq": 8},
    "moe_tiny": {"hidden": 32, "layers": 2, "heads": 4, "kv_heads": 2, "vocab": 128, "seq": 8, "expert_ffn": 32},
}
GLOBAL_BATCH, STEPS = 8, 3


def main(model: str, strategy: str, world: int, rank: int, port: int, out: str) -> None:
    import paddle

    from dlbench.backends.paddle.backend import PaddleBackend
    from dlbench.backends.paddle.data import synthetic_batch
    from dlbench.cases import get_case
    from dlbench.spec import PointSpec, Protocol
    from dlbench.wire import RankContext
    from dlbench.worker import refusal

    spec = PointSpec(
        framework="paddle",
        model=model,
        batch_size=GLOBAL_BATCH // world,
        threads=1,
        protocol=Protocol(0, 1, 1, "median"),
        devices_per_node=world,
        strategy=strategy if world > 1 else "none",
        case_params=tuple(sorted(PARAMS[model].items())),
    )
    case = get_case(model).configured(PARAMS[model])
    case = dataclasses.replace(case, loss=dataclasses.replace(case.loss, aux_weight=0.0))
    ctx = RankContext(
        rank=rank, world_size=world, local_rank=rank, local_world_size=world, master_port=port, rdzv_timeout_s=60
    )
    backend = PaddleBackend()
    assert refusal(backend, spec) is None  # the worker's whole check: the table's rules, then Paddle's
    trainer = backend.build(spec, case, ctx)
    whole = synthetic_batch(case, GLOBAL_BATCH, None, seed=7)
    n = spec.batch_size
    mine = {k: paddle.to_tensor(v.numpy()[rank * n : (rank + 1) * n]) for k, v in whole.items()}
    losses = []
    for _ in range(STEPS):
        trainer.train_step(mine)
        losses.append(trainer.loss())
    facts = {k: str(v) for k, v in backend.facts().items() if k.startswith(("paddle_", "strategy"))}
    with open(out, "w") as f:
        json.dump({"losses": losses, "checksum": trainer.param_checksum(), "facts": facts}, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6])
