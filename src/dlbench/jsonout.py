"""Strict JSON out: what dlbench prints or writes as JSON parses under RFC 8259, which has no Infinity or NaN."""

from __future__ import annotations

import json
import math


def finite(value: object) -> object:
    """The value with every non-finite float (inf, -inf, nan) as None, in nested lists and dicts: strict JSON
    (RFC 8259) has no Infinity, and parsers that follow it reject the file."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def strict_dumps(value: object, **kwargs: object) -> str:
    """json.dumps of the value made strict: non-finite floats written as null (`finite`)."""
    return json.dumps(finite(value), allow_nan=False, **kwargs)  # type: ignore[arg-type]


__all__ = ["finite", "strict_dumps"]
