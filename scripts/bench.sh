#!/usr/bin/env bash
# Benchmarks (not part of the test run; loopback only, bounded in time).
#
#   scripts/bench.sh                         # worker draining 20,000 queued deliveries at concurrency 64
#   scripts/bench.sh --scenario e2e --events 50000 --concurrency 256 --workers 2
#
# Builds in release mode, starts the services if needed and a counting
# receiver on 127.0.0.1:18090, and prints the figures (see bench/bench.py).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/services.sh
ensure_services
cargo build --release --bins --quiet
"$CARGO_TARGET_DIR/release/hookfleet-bench-receiver" 127.0.0.1:18090 2>/dev/null &
receiver=$!
trap 'kill $receiver 2>/dev/null || true' EXIT
for _ in $(seq 1 50); do curl -sf http://127.0.0.1:18090/stats >/dev/null 2>&1 && break; sleep 0.1; done
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(uname -r); $(date -u +%Y-%m-%dT%H:%MZ)"
python3 bench/bench.py "$@"
