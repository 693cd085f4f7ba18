#!/usr/bin/env bash
# Open MPI from Debian's packages, for the mpirun launcher. Idempotent. Needs root and apt.
set -euo pipefail
if [ "$(id -u)" != 0 ]; then echo "mpi.sh: needs root" >&2; exit 77; fi
if ! command -v mpirun >/dev/null; then
  command -v apt-get >/dev/null || { echo "mpi.sh: apt-get is not available" >&2; exit 77; }
  export DEBIAN_FRONTEND=noninteractive
  timeout 300 apt-get update -qq || { echo "mpi.sh: apt-get update failed" >&2; exit 77; }
  timeout 600 apt-get install -y -qq --no-install-recommends openmpi-bin >/dev/null \
    || { echo "mpi.sh: apt-get install of openmpi-bin failed" >&2; exit 77; }
fi
echo "mpi.sh: $(mpirun --version 2>&1 | head -n 1)"
