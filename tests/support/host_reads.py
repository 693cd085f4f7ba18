"""Count the host reads a block of torch code makes: `Tensor.item`, `Tensor.tolist` and `Tensor.cpu` patched to
count every call (each waits for the device on a GPU). Used by the MoE tests (#40) to check that the reads inside
a timed step are the ones the point records as its `host_sync_per_step`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

READS = ("item", "tolist", "cpu")


@contextlib.contextmanager
def counted_host_reads() -> Iterator[dict[str, int]]:
    """{method: calls} of the reads made inside the block (torch.Tensor's methods patched for its duration)."""
    import torch

    counts = dict.fromkeys(READS, 0)
    saved = {name: getattr(torch.Tensor, name) for name in READS}

    def counting(name: str) -> Any:
        real = saved[name]

        def read(self: Any, *args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return real(self, *args, **kwargs)

        return read

    for name in READS:
        setattr(torch.Tensor, name, counting(name))
    try:
        yield counts
    finally:
        for name, real in saved.items():
            setattr(torch.Tensor, name, real)
