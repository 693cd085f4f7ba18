"""What made a point, kept with it: the command line (or suite and point), dlbench's version and commit, and the
lock of the framework environment's packages as the interpreter that ran the point reported them.

Stored in the point's extensible data (``extra["request"]``, the store's extra_json column): no new table or
column, so stores written before it read as they did, with no request (``request_of`` returns None).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from dlbench.records import PointResult
from dlbench.store.errors import StoreError

REQUEST_KEY = "request"
REQUEST_VERSION = 1  # of the record below: a later one adds fields with defaults, and from_dict reads older ones
_NORMALISE = re.compile(r"[-_.]+")
UID_SHOWN = 8  # a point id's prefix as the report prints it: `dlbench reproduce 1a2b3c4d`


class UnreadableRequest(StoreError):
    """A stored request whose field is not what dlbench writes (tampered, or corrupt): one line naming the field."""


def normalise(name: str) -> str:
    """A distribution's name as pip compares it (PEP 503): 'Torch_Vision' -> 'torch-vision'."""
    return _NORMALISE.sub("-", name).lower()


@dataclass(frozen=True)
class Request:
    """How one point was asked for, and the environment that answered it."""

    command: str = ""  # the command line of the run that made the point, as typed (secrets masked by the store)
    kind: str = ""  # the run's kind: run, sweep, rerun, reproduce
    suite: str = ""  # a sweep's suite name ("" outside a sweep); its file is in the command
    suite_point: str = ""  # the point's spec key in that suite
    dlbench_version: str = ""
    dlbench_commit: str = ""  # `git describe` of the checkout dlbench ran from; "" where it is not one
    python: str = ""  # the interpreter that ran the point
    python_version: str = ""
    packages: tuple[tuple[str, str], ...] = ()  # (name, version) of every distribution that interpreter sees
    lock_error: str = ""  # why there is no lock, where it could not be read
    forced: str = ""  # what `dlbench reproduce --run --force` overrode to make this point
    version: int = REQUEST_VERSION

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-able dict (packages as a name -> version object)."""
        d = dataclasses.asdict(self)
        d["packages"] = dict(self.packages)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> Request:
        """Rebuild from stored JSON; unknown keys are ignored and missing ones take their defaults. A known field of
        another type than dlbench writes (a tampered store) is an UnreadableRequest naming it."""
        names = {f.name for f in dataclasses.fields(cls)}
        fields: dict[str, object] = {}
        for k, v in d.items():
            if k not in names or k == "packages":
                continue
            if k == "version":
                if isinstance(v, bool) or not isinstance(v, int):
                    raise UnreadableRequest(f"a stored request is unreadable, field version: {_shown(v)} is no number")
            elif not isinstance(v, str):
                raise UnreadableRequest(f"a stored request is unreadable, field {k}: {_shown(v)} is no text")
            fields[k] = v
        pkgs = d.get("packages", {})
        if not isinstance(pkgs, dict) or not all(isinstance(x, str) for kv in pkgs.items() for x in kv):
            raise UnreadableRequest("a stored request is unreadable, field packages: not a map of names to versions")
        return cls(**fields, packages=tuple(sorted(pkgs.items())))  # type: ignore[arg-type]

    def package_version(self, distribution: str) -> str | None:
        """The locked version of a distribution (names compared as pip does), or None where it is not locked."""
        want = normalise(distribution)
        return next((v for n, v in self.packages if normalise(n) == want), None)


def _shown(value: object) -> str:
    """A stored value in an error line: short, control characters escaped."""
    from dlbench.printable import printable

    text = repr(value)
    return printable(text if len(text) <= 40 else text[:37] + "...")


def reproduce_command(uid: str, length: int = UID_SHOWN) -> str:
    """The command that shows (and with --run re-measures) a stored point; length 0 gives the whole id."""
    return f"dlbench reproduce {uid[:length] if length else uid}"


def request_of(result: PointResult) -> Request | None:
    """The request stored with a point; None for a point stored before requests were kept."""
    raw = result.extra.get(REQUEST_KEY)
    return Request.from_dict(raw) if isinstance(raw, dict) else None


def with_request(result: PointResult, request: Request) -> PointResult:
    """The point with its request in its extensible data."""
    return dataclasses.replace(result, extra={**result.extra, REQUEST_KEY: request.to_dict()})
