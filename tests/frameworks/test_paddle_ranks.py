"""Paddle's rank variables come from the worker's RankContext, never from LOCAL_RANK in os.environ.

Runs in the paddle environment (dlbench.backends.paddle.distributed imports paddle); skips naming it when absent.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.support.frameworks import interpreter_or_skip

pytestmark = [pytest.mark.framework("paddle"), pytest.mark.slow]

SCRIPT = """
import json, os
from dlbench.backends.base import gpu_binding_problem
from dlbench.backends.paddle.distributed import paddle_env
from dlbench.spec import PointSpec, Protocol
from dlbench.wire import RankContext

os.environ["LOCAL_RANK"] = "7"  # a stale variable that must not be read
spec = PointSpec(framework="paddle", model="resnet50", batch_size=2, device="cuda", devices_per_node=2, nodes=2,
                 protocol=Protocol(0, 1, 1, "median"))
# Rank 3 of 4, the second on node "b"; Slurm bound one GPU to it, so it sees one device: ordinal 0.
ctx = RankContext(rank=3, world_size=4, local_rank=1, local_world_size=2, node_rank=1, master_addr="a",
                  master_port=29500, node_hosts=("a", "b"))
visible = 1
os.environ["CUDA_VISIBLE_DEVICES"] = os.environ["SLURM_STEP_GPUS"] = "5"
out = {"env": paddle_env(spec, ctx, ctx.device_index(visible)), "problem": gpu_binding_problem(ctx, visible),
       "all_visible": ctx.device_index(2)}
print(json.dumps(out))
"""


def test_paddle_variables_follow_the_rank_context() -> None:
    python = interpreter_or_skip("paddle")
    proc = subprocess.run([python, "-c", SCRIPT], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    answer = json.loads(proc.stdout.strip().splitlines()[-1])
    env = answer["env"]
    assert env["PADDLE_TRAINER_ID"] == "3" and env["PADDLE_TRAINERS_NUM"] == "4"
    assert env["PADDLE_MASTER"] == "a:29500"
    assert env["PADDLE_TRAINER_ENDPOINTS"] == "a:29501,a:29502,b:29503,b:29504"
    assert env["PADDLE_CURRENT_ENDPOINT"] == "b:29504"
    assert env["PADDLE_RANK_IN_NODE"] == "1"  # from the context, not the stale LOCAL_RANK=7
    assert env["PADDLE_DISTRI_BACKEND"] == "nccl"
    assert env["FLAGS_selected_gpus"] == "0"  # one bound GPU: its ordinal 0, not the local rank
    assert answer["problem"] is None
    assert answer["all_visible"] == 1  # both GPUs visible: local rank 1 takes GPU 1
