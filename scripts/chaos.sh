#!/usr/bin/env bash
# The chaos run (not part of the test run or CI; bounded in time).
#
#   scripts/chaos.sh                                  # 50,000 events over 10 minutes of faults, on loopback
#   scripts/chaos.sh --events 5000 --duration 120     # a short one
#   scripts/chaos.sh --hostile                        # the receiver answers with NUL, binary, gzip bytes
#   sudo scripts/chaos.sh --network                   # workers and producer in network namespaces, with
#                                                     # delay, loss and partitions (root; docs/CHAOS.md)
#
# Starts its own Redis and Postgres on spare ports (the machine's shared ones
# are untouched), builds in release mode, and prints the table described in
# bench/chaos.py. Exit code 1 if an event was lost, left pending, or
# delivered twice without an attempt of its own to explain it.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/services.sh
network=0
for a in "$@"; do [ "$a" = --network ] && network=1; done
if [ "$network" = 1 ]; then
  [ "$(id -u)" = 0 ] || { echo "--network needs root (network namespaces, veth pairs, a bridge)" >&2; exit 2; }
  command -v iptables-legacy >/dev/null || apt_install iptables
  command -v ip >/dev/null || apt_install iproute2
fi
ensure_build_deps
command -v redis-server >/dev/null || apt_install redis-server redis-tools
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || apt_install postgresql
cargo build --release --bins --quiet
if [ "$network" = 0 ]; then
  exec python3 bench/chaos.py "$@"
fi
# The run removes its namespaces, veths and bridge itself (on Ctrl-C and on
# failure too); if it was killed outright, this removes what it left.
# Ctrl-C reaches the run (which cleans up and exits), then this script goes on.
trap ':' INT TERM HUP
rc=0
python3 bench/chaos.py "$@" || rc=$?
python3 bench/netns.py cleanup
exit "$rc"
