"""`dlbench reproduce`'s logic, apart from the command: find a stored point or run by id prefix, say what made it
(command, package lock, host) and what an older point lacks, write the lock as a requirements file, and decide
whether this environment may measure it again."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from packaging.version import InvalidVersion, Version

from dlbench.printable import printable
from dlbench.records import PointResult
from dlbench.store.errors import StoreError
from dlbench.store.request import UID_SHOWN, Request, request_of
from dlbench.store.rows import CorruptRow, RunRecord, StoredPoint, stored_point
from dlbench.store.store import Store
from dlbench.store.store_sql import points, runs

SHOWN_CANDIDATES = 6
# A distribution name as PEP 508 allows it (packaging's own pattern): letters, digits, and . _ - inside.
DISTRIBUTION = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")
LEGACY_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+!_-]*")  # what a version may hold at all, PEP 440 or not


class NotReproducible(StoreError):
    """The id names no point or run, or more than one, or what it names cannot be measured again (exit 2)."""


@dataclass(frozen=True)
class Target:
    """What an id named: one point (``point`` set) or every point of a run."""

    run: RunRecord
    points: tuple[StoredPoint, ...]
    point: StoredPoint | None = None

    @property
    def name(self) -> str:
        """'point 1a2b3c4d' or 'run 20261127-...'."""
        return f"point {self.point.uid[:UID_SHOWN]}" if self.point else f"run {self.run.id}"


def find(store: Store, ident: str) -> Target:
    """The point (by uid) or run (by id) that `ident` names exactly or as the only prefix; NotReproducible lists the
    candidates of an ambiguous prefix, and says so for an unknown one."""
    ident = ident.strip()
    if not ident:
        raise NotReproducible("give a point id or a run id (`dlbench results RUN` lists a run's points)")
    pattern = ident.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    with store.transaction() as c:
        run_ids = [str(r[0]) for r in c.execute(sa.select(runs.c.id).where(runs.c.id.like(pattern, escape="\\")))]
        rows = c.execute(sa.select(points).where(points.c.uid.like(pattern, escape="\\"))).mappings().all()
    exact_runs = [r for r in run_ids if r == ident]
    exact_points = [r for r in rows if r["uid"] == ident]
    if exact_runs or exact_points:
        run_ids, rows = exact_runs, exact_points
    found = len(run_ids) + len(rows)
    if found == 0:
        raise NotReproducible(f"no point or run {ident!r} in {store.path} (`dlbench results` lists the runs)")
    if found > 1:
        names = [f"run {r}" for r in run_ids] + [
            f"point {r['uid'][:12]} ({r['framework']} {r['model']} bs{r['batch_size']}, run {r['run_id']})"
            for r in rows
        ]
        more = f", and {found - SHOWN_CANDIDATES} more" if found > SHOWN_CANDIDATES else ""
        raise NotReproducible(f"{ident!r} is ambiguous: {'; '.join(names[:SHOWN_CANDIDATES])}{more}: give more of it")
    if run_ids:
        run = store.get_run(run_ids[0])
        return Target(run, tuple(store.points([run.id])))
    try:
        point = stored_point(rows[0])
    except CorruptRow as exc:
        raise NotReproducible(f"point {ident} in {store.path} cannot be read: {exc}") from None
    return Target(store.get_run(point.run_id), (point,), point)


def command_of(point: StoredPoint, run: RunRecord) -> str:
    """The command line that made the point: its own request's, else its run's (every store kept that)."""
    req = request_of(point.result)
    return req.command if req is not None and req.command else run.command


def what_is_missing(point: StoredPoint, run: RunRecord) -> list[str]:
    """What a stored point lacks to be reproduced exactly (empty when nothing): a point stored before requests
    were kept has its run's command, its spec and its host, but no package lock."""
    req = request_of(point.result)
    gone: list[str] = []
    if not command_of(point, run):
        gone.append("its command line")
    if req is None or not req.packages:
        gone.append("its package lock" + (f" ({req.lock_error})" if req is not None and req.lock_error else ""))
    if req is None:
        gone.append("the interpreter that ran it")
        if not point.result.env.descriptive.get("git_commit"):
            gone.append("the dlbench commit")
    return gone


_HOST_KEYS: tuple[tuple[str, str, str], ...] = (
    # (shown as, key, where: i = identity, d = descriptive)
    ("host", "hostname", "d"),
    ("os", "os", "d"),
    ("cpu", "cpu_model", "i"),
    ("cpu cores", "cpu_cores", "i"),
    ("logical cpus", "logical_cpus", "d"),
    ("memory", "memory_bytes", "d"),
    ("threads", "threads", "i"),
    ("device", "device", "i"),
    ("device model", "device_model", "i"),
    ("devices", "device_count", "i"),
    ("gpu memory", "gpu_memory_bytes", "d"),
    ("compute capability", "gpu_compute_capability", "d"),
    ("driver", "driver", "i"),
    ("cuda", "cuda", "i"),
    ("cudnn", "cudnn", "i"),
    ("nccl", "nccl", "i"),
    ("power limit W", "gpu_power_limit_w", "d"),
    ("ecc", "gpu_ecc", "d"),
    ("mig", "gpu_mig", "d"),
    ("visible gpus", "cuda_visible_devices", "d"),
    ("interconnect", "gpu_interconnect", "d"),
    ("nvlink links/gpu", "nvlink_links_per_gpu", "d"),
    ("pcie link", "pcie_link", "d"),
    ("gpu 0-1 path", "gpu_pair_path", "d"),
    ("framework", "framework", "i"),
    ("framework version", "framework_version", "i"),
    ("math mode", "math_mode", "i"),
    ("python", "python", "d"),
    ("dlbench", "dlbench_version", "i"),
    ("dlbench commit", "git_commit", "d"),
    ("measured at", "time", "d"),
)


def host_facts(result: PointResult) -> list[tuple[str, str]]:
    """What the host was, as the point recorded it: CPU, GPU, driver, topology where known (known keys only)."""
    env = result.env
    out = []
    for shown, key, where in _HOST_KEYS:
        value = (env.identity if where == "i" else env.descriptive).get(key, "")
        if value:
            if key.endswith("memory_bytes") and value.isdigit():
                value = f"{int(value) / 2**30:,.1f} GiB"
            out.append((shown, value))
    req = request_of(result)
    if req is not None and req.dlbench_commit:
        out = [(k, v) for k, v in out if k != "dlbench commit"] + [("dlbench commit", req.dlbench_commit)]
    return out


def _comment(text: str) -> str:
    """Stored text in a comment line: control characters escaped, a newline included (it would start a line)."""
    return printable(text).replace("\n", "\\n")


def pin_of(name: str, version: str) -> str:
    """'name==version' for one lock entry ('# name==version ...' for a version pip cannot pin), or NotReproducible
    where the entry is no requirement (a stored name or version holding a newline, an option such as
    --index-url, a URL ...): a store from elsewhere must not write lines of its own into the reader's next
    `pip install -r`."""
    if DISTRIBUTION.fullmatch(name) is None or LEGACY_VERSION.fullmatch(version) is None:
        raise NotReproducible(
            f"the stored package lock is unreadable, field packages: {printable(repr(name))[:60]} "
            f"{printable(repr(version))[:40]} is not a requirement (name==version); nothing written"
        )
    try:
        Version(version)
    except InvalidVersion:
        return f"# {name}=={version} (not a PEP 440 version: pip cannot pin it)"
    return f"{name}=={version}"


def requirements_text(req: Request, what: str) -> str:
    """The lock as a pip requirements file (`pip install -r`), headed by where it came from; dlbench itself is a
    comment (install it from its commit), as is any package whose local version label needs its own index. Every
    entry is checked to be a requirement first (pin_of); stored text in the comments is escaped onto its line."""
    head = [
        f"# {_comment(what)}: packages of {_comment(req.python or 'its interpreter')} "
        f"(Python {_comment(req.python_version or '?')})",
        f"# written by dlbench reproduce; dlbench {_comment(req.dlbench_version)} "
        f"{_comment(req.dlbench_commit)}".rstrip(),
    ]
    lines = []
    for name, version in req.packages:
        pin = pin_of(name, version)
        if pin.startswith("#"):
            lines.append(pin)
        elif name.lower() == "dlbench":
            at = _comment(req.dlbench_commit or "its version")
            lines.append(f"# {pin} (install dlbench from its checkout at {at})")
        elif "+" in version:
            lines.append(f"{pin}  # a local build ({version.partition('+')[2]}): pip needs its vendor's index")
        else:
            lines.append(pin)
    return "\n".join(head + lines) + "\n"


def version_refusal(stored: PointResult, framework: str, distribution: str, here: str | None) -> str | None:
    """Why this environment may not measure the point again (its framework's version differs from the one that
    made it), or None. `here` is this environment's version of the framework's distribution."""
    req = request_of(stored)
    then = req.package_version(distribution) if req is not None else None
    source = f"{distribution} in its lock"
    if then is None:
        then, source = stored.env.identity.get("framework_version"), "framework_version it recorded"
    if then is None or here is None or then == here:
        return None
    return (
        f"{framework} here is {here} but the point was measured with {then} ({source}): install {then} "
        f"(`--env-file` writes the lock), or --force to measure it anyway"
    )


def specs_of(target: Target) -> list[PointResult]:
    """The distinct configurations to measure again, in stored order (a configuration stored twice, once)."""
    seen: dict[str, PointResult] = {}
    for p in target.points:
        seen.setdefault(p.result.spec.to_json(), p.result)
    return list(seen.values())


def labels(found: Sequence[StoredPoint]) -> list[str]:
    """'1a2b3c4d torch alexnet bs2 fp32 1n1c ok' for each point."""
    from dlbench.analysis.compare import label

    return [f"{p.uid[:UID_SHOWN]} {label(p.result)} {p.result.status}" for p in found]
