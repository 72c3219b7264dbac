#!/usr/bin/env bash
# The whole test suite against real Redis, real Postgres and real HTTP
# receivers on 127.0.0.1. Starts the services if needed; every test makes its
# own database and Redis key prefix (named after this run), and the run
# removes whatever a failed test left behind.
#
#   scripts/test.sh                  # everything
#   scripts/test.sh -E 'test(retry)' # nextest filter
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/services.sh
ensure_services

run="r$(date +%s)$$"
export HOOKFLEET_TEST_RUN="$run"
export HOOKFLEET_TEST_ADMIN_URL="$HOOKFLEET_PG_ADMIN"
export HOOKFLEET_TEST_REDIS_URL="$HOOKFLEET_REDIS"
unset DATABASE_URL REDIS_URL HOOKFLEET_REDIS_PREFIX HOOKFLEET_RETRY_SCHEDULE HOOKFLEET_QUEUE_GRACE HOOKFLEET_ALLOWED_NETWORKS

cleanup() {
  psql "$HOOKFLEET_PG_ADMIN" -Atqc "SELECT datname FROM pg_database WHERE datname LIKE 'hf_t_${run}_%'" 2>/dev/null |
    while read -r db; do psql "$HOOKFLEET_PG_ADMIN" -qc "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null 2>&1 || true; done
  redis-cli -u "$HOOKFLEET_REDIS" --scan --pattern "hftest:${run}:*" 2>/dev/null | xargs -r -n 500 redis-cli -u "$HOOKFLEET_REDIS" del >/dev/null 2>&1 || true
}
trap cleanup EXIT

# Signatures are also judged by the official Standard Webhooks library, as
# receivers use it (a virtual environment of the test run's own).
venv="$HOME/.cache/hookfleet/test-venv"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import standardwebhooks' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q standardwebhooks
fi
export HOOKFLEET_TEST_PYTHON="$venv/bin/python"

# The end-to-end tests run the real binaries: build them first.
cargo build --bins --quiet
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --no-fail-fast "$@"
else
  cargo test --no-fail-fast "$@"
fi
