#!/usr/bin/env bash
# The fleet in under a minute: a signed webhook is delivered; the receiver
# goes down and the events are Failed with a retry scheduled (not lost, not
# retried in a loop); the receiver comes back, the sweeper ticks, and the
# retries are Delivered with signatures the receiver verifies.
#
# Uses a compressed retry schedule (5s,10s,20s instead of 5m,30m,2h...) and a
# database and Redis prefix of its own (hookfleet_demo, hookfleet-demo:).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/services.sh
ensure_services

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "building hookfleet"
cargo build --bins --quiet
BIN="$CARGO_TARGET_DIR/debug"

DB=hookfleet_demo
psql "$HOOKFLEET_PG_ADMIN" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB" >/dev/null
export DATABASE_URL
DATABASE_URL=$(pg_url_for "$DB")
export REDIS_URL="$HOOKFLEET_REDIS"
export HOOKFLEET_REDIS_PREFIX="hookfleet-demo:"
export HOOKFLEET_RETRY_SCHEDULE="5s,10s,20s"
export HOOKFLEET_ALLOWED_NETWORKS="127.0.0.1/32"   # the demo receiver is on loopback
redis-cli -u "$REDIS_URL" --scan --pattern "hookfleet-demo:*" | xargs -r redis-cli -u "$REDIS_URL" del >/dev/null

PORT=18089
LOG=$(mktemp -d)
# The safe path: a generated signing secret for the webhook, and a
# generated key (in a file only this user reads) sealing it at rest.
SECRET="$("$BIN/hookfleet" secrets generate)"
(umask 077 && "$BIN/hookfleet" secrets generate --sealing-key > "$LOG/sealing.key")
export HOOKFLEET_SECRET_KEY_FILE="$LOG/sealing.key"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true
  rm -f "$LOG/sealing.key"
}
trap cleanup EXIT

receiver_up() {
  python3 scripts/demo_receiver.py "$PORT" "$SECRET" >>"$LOG/receiver.log" 2>&1 &
  RECEIVER=$!
  pids+=("$RECEIVER")
  for _ in $(seq 1 50); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && return; sleep 0.1; done
}
receiver_down() { kill "$RECEIVER"; wait "$RECEIVER" 2>/dev/null || true; }

emit() { # NAME TOTAL
  "$BIN/hookfleet-producer" emit --entity-type "Sales Order" --event on_submit --name "$1" --doc - \
    <<<"{\"name\": \"$1\", \"customer\": \"ACME\", \"grand_total\": $2}" >/dev/null
}

wait_for_no() { # STATUS: wait until no row has it (at most 60 s)
  for _ in $(seq 1 120); do
    [ "$(psql "$DATABASE_URL" -Atc "SELECT count(*) FROM webhook_request_logs WHERE status = '$1'")" = 0 ] && return
    sleep 0.5
  done
  echo "rows still $1 after 60s" >&2; return 1
}

step "schema and a signed webhook"
"$BIN/hookfleet" migrate
"$BIN/hookfleet" webhook add sales-orders --entity-type "Sales Order" --event on_submit \
  --url "http://127.0.0.1:$PORT/hooks/orders" --secret-file <(printf '%s\n' "$SECRET") \
  --body-template '{"order": "{{ doc.name }}", "customer": "{{ doc.customer }}", "total": {{ doc.grand_total }}}'
"$BIN/hookfleet" webhook list

step "a worker and a receiver that verifies signatures"
"$BIN/hookfleet-worker" --concurrency 16 >>"$LOG/worker.log" 2>&1 &
pids+=("$!")
receiver_up

step "the receiver is up: three orders are delivered"
for i in 1 2 3; do emit "SO-000$i" "$((i * 100))"; done
wait_for_no Queued
"$BIN/hookfleet" delivery list

step "the receiver goes down: three more orders are Failed, with a retry scheduled"
receiver_down
for i in 4 5 6; do emit "SO-000$i" "$((i * 100))"; done
wait_for_no Queued
"$BIN/hookfleet" delivery list --status Failed

step "the receiver comes back; the sweeper ticks every 2s and the retries are Delivered"
receiver_up
"$BIN/hookfleet-sweeper" --interval 2s >>"$LOG/sweeper.log" 2>&1 &
pids+=("$!")
wait_for_no Failed
"$BIN/hookfleet" delivery list
id=$(psql "$DATABASE_URL" -Atc "SELECT id FROM webhook_request_logs WHERE entity_name = 'SO-0004'")
"$BIN/hookfleet" delivery show "$id"

step "what the receiver saw"
cat "$LOG/receiver.log"
step "what the sweeper did"
grep -h "tick" "$LOG/sweeper.log" | grep -v "enqueued=0" || true

delivered=$(psql "$DATABASE_URL" -Atc "SELECT count(*) FROM webhook_request_logs WHERE status = 'Delivered'")
verified=$(grep -c VERIFIED "$LOG/receiver.log" || true)
rejected=$(grep -c REJECTED "$LOG/receiver.log" || true)
step "result"
echo "$delivered of 6 orders Delivered; the receiver verified $verified requests and rejected $rejected."
"$BIN/hookfleet" stats
[ "$delivered" = 6 ] && [ "$rejected" = 0 ]
