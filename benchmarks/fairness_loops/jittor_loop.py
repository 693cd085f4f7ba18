"""A bare Jittor loop, as Jittor's own examples train: jittor.models.resnet50 (torchvision's layout, v1.5), SGD
with momentum 0.9, ``loss = nn.cross_entropy_loss(model(x), y)`` and ``optimizer.step(loss)`` (backward and update
in one call), on one synthetic batch; no dlbench import. Jittor always JIT-compiles its operators (dlbench records
`jit (always)` and refuses --compile): so does the loop. The settings dlbench's backend sets before jittor loads
(no MKL download, no CUDA toolkit search, no MPI build) are set here the same way. fp32 on the CPU only."""

from __future__ import annotations

import os
import sys
from pathlib import Path

for _var, _value in (("use_mkl", "0"), ("nvcc_path", ""), ("use_mpi", "0")):
    os.environ.setdefault(_var, _value)

import jittor as jt  # noqa: E402
from jittor import nn  # noqa: E402
from jittor.models import resnet50  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from common import measure, parse_args  # noqa: E402


def main() -> None:
    """Train Jittor's ResNet-50 the way its examples do."""
    args = parse_args(__doc__)
    if args.device != "cpu" or args.precision != "fp32" or args.compile:
        raise SystemExit("the Jittor loop measures fp32 on the CPU, always JIT-compiled (as dlbench's Jittor points)")
    jt.flags.use_cuda = 0
    model = resnet50()
    model.train()
    optimizer = jt.optim.SGD(model.parameters(), 0.1, momentum=0.9)
    images = jt.randn(args.batch_size, 3, args.input_size, args.input_size)
    labels = jt.randint(0, 1000, (args.batch_size,))
    last: list[jt.Var] = []

    def step() -> None:
        loss = nn.cross_entropy_loss(model(images), labels)
        optimizer.step(loss)
        last[:] = [loss]

    def sync() -> None:  # Jittor runs lazily: fetch the last loss, then wait for every queued operator
        last[0].sync()
        jt.sync_all(True)

    measure(step, sync, args, "jittor.models.resnet50, optimizer.step(loss)")


if __name__ == "__main__":
    main()
