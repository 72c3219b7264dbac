#!/usr/bin/env bash
# The chaos run (not part of the test run; loopback only; bounded in time).
#
#   scripts/chaos.sh                                  # 50,000 events over 10 minutes of faults
#   scripts/chaos.sh --events 5000 --duration 120     # a short one
#   scripts/chaos.sh --hostile                        # the receiver answers with NUL, binary, gzip bytes
#
# Starts its own Redis and Postgres on spare ports (the machine's shared ones
# are untouched), builds in release mode, and prints the table described in
# bench/chaos.py. Exit code 1 if an event was lost, left pending, or
# delivered twice without an interrupted attempt to explain it.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/services.sh
ensure_build_deps
command -v redis-server >/dev/null || apt_install redis-server redis-tools
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || apt_install postgresql
cargo build --release --bins --quiet
exec python3 bench/chaos.py "$@"
