#!/usr/bin/env bash
# The whole test suite against real Redis, real Postgres and real HTTP
# receivers on 127.0.0.1. Starts the services if needed; every test makes its
# own database and Redis key prefix (named after this run), and the run
# removes whatever a failed test left behind.
#
#   scripts/test.sh                  # everything: the suite on one Redis, then
#                                    # the Redis suites again on a Redis Cluster
#   scripts/test.sh -E 'test(retry)' # nextest filter (one Redis only)
#   scripts/test.sh --cluster [ARGS] # the cluster pass only (ARGS: a filter
#                                    # within it)
#   scripts/test.sh --pooler [ARGS]  # the PgBouncer pass only
#
# The cluster pass (a three-node Redis Cluster this script starts on spare
# loopback ports and stops after) runs the suites whose code paths send
# Redis commands, each kind of command at least once: enqueue (producer,
# emit, ingest, sweeper), take, fair take and bounce (fairness,
# concurrency, fleet-wide limits), ack and the in-flight keys (first attempts, retries, lost
# Redis), the reaper and dead letters (faults), replay (delivery CLI), pause
# and resume (lifecycle), the worker list and the console's reads (console
# API). Suites about templates, validation, SSRF, secrets
# and Postgres alone send nothing to Redis that these do not, and stay out
# to keep CI short.
#
# The pooler pass runs the suites that send the fleet's statements (emit,
# claim, outcomes, sweep, replay, pause, prune, migrate, webhook
# definitions, the console's filtered lists) through a PgBouncer in transaction mode (Debian's 1.18, no
# prepared statements) started on a spare port and stopped after: every
# process of those tests, and the tests' own reads, go through it.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/services.sh
ensure_services
ensure_browser
ensure_promtool

only=""
case "${1:-}" in --cluster|--pooler) only=${1#--}; shift ;; esac
CLUSTER_SUITES='binary(first_attempt) | binary(retries) | binary(faults) | binary(dead_letters)
  | binary(lifecycle) | binary(queue_fairness) | binary(worker_concurrency) | binary(delivery_cli)
  | binary(emit_cli) | binary(ingest) | binary(fleet_limits) | binary(console_api)'
POOLER_SUITES='binary(first_attempt) | binary(retries) | binary(delivery_store) | binary(delivery_cli)
  | binary(lifecycle) | binary(emit_cli) | binary(webhook_definitions) | binary(migrate)
  | binary(console_api)'

run="r$(date +%s)$$"
export HOOKFLEET_TEST_RUN="$run"
export HOOKFLEET_TEST_ADMIN_URL="$HOOKFLEET_PG_ADMIN"
export HOOKFLEET_TEST_REDIS_URL="$HOOKFLEET_REDIS"
unset DATABASE_URL REDIS_URL HOOKFLEET_REDIS_PREFIX HOOKFLEET_RETRY_SCHEDULE HOOKFLEET_QUEUE_GRACE HOOKFLEET_ALLOWED_NETWORKS
# Tracing is on only where a test turns it on (the unit tests read these too).
unset OTEL_EXPORTER_OTLP_ENDPOINT OTEL_EXPORTER_OTLP_TRACES_ENDPOINT OTEL_SERVICE_NAME HOOKFLEET_SEND_TRACEPARENT

cleanup() {
  set +e +o pipefail # a failing cleanup step must not stop the others
  psql "$HOOKFLEET_PG_ADMIN" -Atqc "SELECT datname FROM pg_database WHERE datname LIKE 'hf_t_${run}_%'" 2>/dev/null |
    while read -r db; do psql "$HOOKFLEET_PG_ADMIN" -qc "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null 2>&1 || true; done
  redis-cli -u "$HOOKFLEET_REDIS" --scan --pattern "hftest:${run}:*" 2>/dev/null | xargs -r -n 500 redis-cli -u "$HOOKFLEET_REDIS" del >/dev/null 2>&1 || true
}
trap 'cleanup; stop_redis_cluster; stop_pgbouncer' EXIT

# Signatures are also judged by the official Standard Webhooks library, as
# receivers use it, scrapes by the reference Prometheus client's parsers,
# exported traces by the official OTLP protobuf definitions
# (opentelemetry-proto), and the management API by a client generated from
# its OpenAPI document (openapi-python-client) and by schemathesis (a
# virtual environment of the test run's own; the API tools pinned, as their
# checks change between releases).
venv="$HOME/.cache/hookfleet/test-venv"
api_tools=(openapi-python-client==0.29.1 schemathesis==4.32.5)
if [ ! -x "$venv/bin/python" ] ||
   ! "$venv/bin/python" -c 'import standardwebhooks, prometheus_client, opentelemetry.proto' 2>/dev/null ||
   ! "$venv/bin/pip" freeze 2>/dev/null | grep -qxF -e "${api_tools[0]}" ||
   ! "$venv/bin/pip" freeze 2>/dev/null | grep -qxF -e "${api_tools[1]}"; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q standardwebhooks prometheus-client opentelemetry-proto "${api_tools[@]}"
fi
export HOOKFLEET_TEST_PYTHON="$venv/bin/python"
# ...and by the official library for Node, as a Node receiver uses it.
node_dir="$HOME/.cache/hookfleet/test-node"
if [ ! -f "$node_dir/node_modules/standardwebhooks/package.json" ]; then
  command -v npm >/dev/null || apt_install nodejs npm
  mkdir -p "$node_dir"
  npm install --prefix "$node_dir" --no-audit --no-fund --silent standardwebhooks@1
fi
export HOOKFLEET_TEST_NODE_MODULES="$node_dir/node_modules"
export HOOKFLEET_TEST_PROMTOOL="$(command -v promtool || echo promtool)"

# The end-to-end tests run the real binaries: build them first.
cargo build --bins --quiet
if ! cargo nextest --version >/dev/null 2>&1; then
  [ -z "$only" ] || { echo "the --$only pass needs cargo-nextest" >&2; exit 2; }
  cargo test --no-fail-fast "$@"
  exit
fi
# The suites of pass $1 ($2: their filter), within the caller's filter when
# only that pass runs.
pass_filter() {
  if [ "$only" = "$1" ] && [ "${ARGS[0]:-}" = "-E" ] && [ ${#ARGS[@]} -ge 2 ]; then
    printf '(%s) & (%s)' "$2" "${ARGS[1]}"
  else
    printf '%s' "$2"
  fi
}
ARGS=("$@")
status=0
if [ -z "$only" ]; then
  cargo nextest run --no-fail-fast "$@" || status=$?
fi
if [ "$only" = cluster ] || { [ -z "$only" ] && [ $# -eq 0 ]; }; then
  start_redis_cluster
  echo "== the Redis suites again, on a three-node Redis Cluster ==" >&2
  HOOKFLEET_TEST_REDIS_URL="$HOOKFLEET_REDIS_CLUSTER_URLS" HOOKFLEET_TEST_REDIS_CLUSTER=true \
    cargo nextest run --no-fail-fast -E "$(pass_filter cluster "$CLUSTER_SUITES")" || status=$?
  stop_redis_cluster
fi
if [ "$only" = pooler ] || { [ -z "$only" ] && [ $# -eq 0 ]; }; then
  start_pgbouncer
  echo "== the Postgres suites again, through PgBouncer in transaction mode ==" >&2
  HOOKFLEET_TEST_PG_POOLER_URL="$HOOKFLEET_PGBOUNCER_ADMIN" \
    cargo nextest run --no-fail-fast -E "$(pass_filter pooler "$POOLER_SUITES")" || status=$?
  stop_pgbouncer
fi
exit $status
