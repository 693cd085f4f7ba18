"""Synthetic batches, made once on the device (as tf_cnn_benchmarks does). Never timed."""

from __future__ import annotations

import torch

from dlbench.cases import Case, ImageInput, TextInput


def synthetic_batch(case: Case, batch: int, device: torch.device, input_size: int | None = None,
                    seed: int = 0, channels_last: bool = False) -> dict[str, torch.Tensor]:
    """One fixed batch for the case; input_size shrinks the image side or sequence length for quick tests."""
    g = torch.Generator().manual_seed(seed)
    if isinstance(case.input, ImageInput):
        side = input_size or case.input.size
        images = torch.randn(batch, case.input.channels, side, side, generator=g)
        labels = torch.randint(0, case.input.classes, (batch,), generator=g)
        images = images.to(device)
        if channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        return {"images": images, "labels": labels.to(device)}
    assert isinstance(case.input, TextInput)
    seq = input_size or case.input.seq_len
    ids = torch.randint(0, case.input.vocab, (batch, seq), generator=g)
    types = torch.zeros(batch, seq, dtype=torch.long)
    types[:, seq // 2:] = 1
    mask = torch.ones(batch, seq, dtype=torch.long)
    masked = torch.rand(batch, seq, generator=g) < case.input.mask_prob
    mlm = torch.where(masked, ids, torch.full_like(ids, -100))
    nsp = torch.randint(0, 2, (batch,), generator=g)
    return {k: v.to(device) for k, v in dict(input_ids=ids, token_type_ids=types, attention_mask=mask,
                                             mlm_labels=mlm, nsp_labels=nsp).items()}
