#!/usr/bin/env bash
# Two emulated "hosts" on this machine: network namespaces dlbench-h1 and dlbench-h2, each with an interface
# named dl0 (10.200.0.1/24 and 10.200.0.2/24), joined by a bridge in a third namespace (dlbench-br).
# The addresses exist only inside these namespaces; nothing outside is touched. Idempotent. Needs root.
# Enter a host with `nsenter --net=/run/netns/dlbench-h1 CMD` (not `ip netns exec`, which remounts /sys).
# Remove everything with `scripts/emulate/netns.sh down`.
set -euo pipefail

PREFIX=${DLBENCH_NETNS_PREFIX:-dlbench}
SUBNET=${DLBENCH_NETNS_SUBNET:-10.200.0}
BR="$PREFIX-br"
HOSTS=("$PREFIX-h1" "$PREFIX-h2")

if [ "$(id -u)" != 0 ]; then echo "netns.sh: needs root (network namespaces)" >&2; exit 77; fi
command -v ip >/dev/null || { echo "netns.sh: the ip command (iproute2) is missing" >&2; exit 77; }

in_ns() { local ns=$1; shift; nsenter --net="/run/netns/$ns" "$@"; }

if [ "${1:-up}" = down ]; then
  for ns in "${HOSTS[@]}" "$BR"; do ip netns del "$ns" 2>/dev/null || true; done
  exit 0
fi

[ -e "/run/netns/$BR" ] || ip netns add "$BR"
in_ns "$BR" ip link set lo up
in_ns "$BR" ip link show br0 >/dev/null 2>&1 || in_ns "$BR" ip link add br0 type bridge
in_ns "$BR" ip link set br0 up

i=0
for ns in "${HOSTS[@]}"; do
  i=$((i + 1))
  [ -e "/run/netns/$ns" ] || ip netns add "$ns"
  in_ns "$ns" ip link set lo up
  if ! in_ns "$ns" ip link show dl0 >/dev/null 2>&1; then
    # Create the pair inside the host namespace, then move the far end into the bridge namespace.
    in_ns "$ns" ip link add dl0 type veth peer name "h$i-br"
    in_ns "$ns" ip link set "h$i-br" netns "$BR"
  fi
  addrs=$(in_ns "$ns" ip -o addr show dev dl0)  # captured first: grep -q in a pipe trips pipefail
  grep -qF " $SUBNET.$i/24 " <<<"$addrs" || in_ns "$ns" ip addr add "$SUBNET.$i/24" dev dl0
  in_ns "$ns" ip link set dl0 up
  in_ns "$BR" ip link set "h$i-br" master br0
  in_ns "$BR" ip link set "h$i-br" up
done

# Check that h1 reaches h2 (ping is not installed here: a TCP socket through Python), every wait bounded.
in_ns "${HOSTS[1]}" python3 -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 29399)); s.listen(1); s.settimeout(10)
c, _ = s.accept(); c.close()' "$SUBNET.2" &
listener=$!
ok=0
for _ in $(seq 50); do
  if in_ns "${HOSTS[0]}" python3 -c '
import socket, sys
socket.create_connection((sys.argv[1], 29399), timeout=1).close()' "$SUBNET.2" 2>/dev/null; then ok=1; break; fi
  sleep 0.2
done
kill "$listener" 2>/dev/null || true
wait "$listener" 2>/dev/null || true
if [ "$ok" != 1 ]; then echo "netns.sh: ${HOSTS[0]} cannot reach ${HOSTS[1]} at $SUBNET.2" >&2; exit 1; fi
echo "netns.sh: ${HOSTS[0]}=$SUBNET.1 ${HOSTS[1]}=$SUBNET.2 (interface dl0) ready"
