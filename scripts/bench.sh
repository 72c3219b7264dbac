#!/usr/bin/env bash
# Benchmarks (not part of the test run; loopback only; bounded in time).
#
#   scripts/bench.sh                      # everything, ~10 min: prints the tables,
#                                         # rewrites docs/PERFORMANCE.md and docs/performance.png
#   scripts/bench.sh --only drain --concurrency 64     # one run: a worker draining 50,000 queued deliveries
#   scripts/bench.sh --only e2e --webhooks 8 --workers 2 --concurrency 256
#   scripts/bench.sh --only tick          # sweeper tick time at 10k, 100k and 1M rows
#   scripts/bench.sh --only retention     # prune at 10M rows beside a delivering worker (~30 min)
#   scripts/bench.sh --only slow --webhooks 8 --concurrency 256   # 100 ms receivers: a slot's turnaround
#   scripts/bench.sh --only fleet|cluster|defaults   # fleet-wide limits, Redis Cluster, no-flag defaults
#   HOOKFLEET_BENCH_TOP_STATEMENTS=1 ...   # also log where Postgres's time went (pg_stat_statements)
#
# Builds in release mode; installs wrk (Debian) and the baseline's Python
# packages (rq, requests, psycopg, matplotlib) into a virtual environment
# under ~/.cache/hookfleet; starts its own Postgres and Redis on spare ports.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/services.sh
ensure_build_deps
command -v redis-server >/dev/null || apt_install redis-server redis-tools
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || apt_install postgresql postgresql-contrib
command -v wrk >/dev/null || apt_install wrk
venv="$HOME/.cache/hookfleet/bench-venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/pip" install -q -r bench/baseline/requirements.txt matplotlib
cargo build --release --bins --quiet
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(uname -r); $(date -u +%Y-%m-%dT%H:%MZ)" >&2
exec "$venv/bin/python" bench/bench.py "$@"
