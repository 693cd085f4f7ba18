"""``python -m dlbench.envfile FILE ARGV...``: set the variables in FILE (a JSON object), then exec ARGV.

How a remote rank receives its environment (dlbench.launch.hosts): the values travel in a 0600 file in the
point's shared folder, never on a command line that a remote shell would parse or /proc would show.
"""

from __future__ import annotations

import json
import os
import sys


def main(argv: list[str] | None = None) -> int:
    """Read FILE, update the environment, and replace this process with ARGV."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        print("usage: python -m dlbench.envfile FILE ARGV...", file=sys.stderr)
        return 2
    try:
        with open(args[0], encoding="utf-8") as fh:
            env = json.load(fh)
    except (OSError, ValueError) as exc:
        print(f"dlbench.envfile: cannot read {args[0]}: {exc}", file=sys.stderr)
        return 2
    if not isinstance(env, dict):
        print(f"dlbench.envfile: {args[0]} must hold a JSON object", file=sys.stderr)
        return 2
    os.environ.update({str(k): str(v) for k, v in env.items()})
    os.execvp(args[1], args[1:])
    return 127  # not reached: execvp replaces the process or raises


if __name__ == "__main__":
    sys.exit(main())
