"""Stop a test's private PostgreSQL server when the test process ends, however it ends (kill -9 included).

    python pg_watchdog.py FD PG_CTL DATA_DIR AS_POSTGRES

Started by tests/support/stores.py in a session of its own, holding the read end FD of a pipe whose write end only
the test process holds. When that process ends, the kernel closes its end; the read returns, and this stops the
server (pg_ctl stop -m immediate, as user postgres where the server runs as it) and removes its files. Standalone:
it imports nothing of dlbench or the tests, so nothing there can keep it from doing its one job.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path


def main() -> int:
    """Wait for the test process to end, then stop its server."""
    fd, pg_ctl, data, as_postgres = int(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), sys.argv[4] == "1"
    while True:
        try:
            if not os.read(fd, 1):
                break  # end of file: every write end is closed, the test process is gone
        except InterruptedError:
            continue
        except OSError:
            break
    argv = [pg_ctl, "-D", str(data), "-m", "immediate", "stop"]
    if as_postgres:
        argv = ["runuser", "-u", "postgres", "--", *argv]
    if data.exists():
        subprocess.run(argv, capture_output=True, timeout=120, check=False)
    shutil.rmtree(data.parent, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
