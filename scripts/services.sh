#!/usr/bin/env bash
# Makes PostgreSQL and Redis reachable on 127.0.0.1 (starting them if they are
# installed but stopped, installing them from Debian packages if missing), and
# the build's system libraries present. Sourced by the other scripts; exports
# HOOKFLEET_PG_ADMIN (a Postgres URL allowed to create databases) and
# HOOKFLEET_REDIS (a Redis URL).
#
# Override with HOOKFLEET_PG_ADMIN / HOOKFLEET_REDIS to use services elsewhere.

say() { printf '[services] %s\n' "$*" >&2; }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    say "need root for: $*"; return 1; fi
}

apt_install() {
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  say "installing ${missing[*]} (Debian packages)"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

ensure_build_deps() {
  # libpq for diesel (sync, over libpq), OpenSSL for HTTPS, pkg-config to find them.
  command -v dpkg >/dev/null || return 0
  apt_install libpq-dev libssl-dev pkg-config
}

pg_ok() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }

ensure_postgres() {
  if [ -n "${HOOKFLEET_PG_ADMIN:-}" ]; then return 0; fi
  if ! command -v pg_isready >/dev/null || ! ls /etc/postgresql/*/main >/dev/null 2>&1; then
    apt_install postgresql postgresql-client
  fi
  if ! pg_ok; then
    say "starting PostgreSQL"
    local v
    v=$(ls /etc/postgresql | sort -V | tail -1)
    as_root pg_ctlcluster --skip-systemctl-redirect "$v" main start || true
    for _ in $(seq 1 30); do pg_ok && break; sleep 0.5; done
  fi
  pg_ok || { say "PostgreSQL is not reachable on 127.0.0.1:5432"; return 1; }
  # Trust auth (as on the CI machines)? Otherwise make a password role once,
  # through the local socket as the postgres OS user.
  if psql -h 127.0.0.1 -U postgres -d postgres -Atqc 'select 1' >/dev/null 2>&1 </dev/null; then
    export HOOKFLEET_PG_ADMIN="postgres://postgres@127.0.0.1:5432/postgres"
  else
    as_root su postgres -c "psql -qc \"DO \\\$\\\$BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname='hookfleet') THEN CREATE ROLE hookfleet LOGIN SUPERUSER PASSWORD 'hookfleet'; END IF; END\\\$\\\$\"" >/dev/null
    export HOOKFLEET_PG_ADMIN="postgres://hookfleet:hookfleet@127.0.0.1:5432/postgres"
  fi
}

redis_ok() { redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG; }

ensure_redis() {
  if [ -n "${HOOKFLEET_REDIS:-}" ]; then return 0; fi
  command -v redis-server >/dev/null || apt_install redis-server redis-tools
  if ! redis_ok; then
    say "starting Redis (nothing kept on disk)"
    mkdir -p /tmp/hookfleet-redis
    redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
      --dir /tmp/hookfleet-redis --logfile /tmp/hookfleet-redis/redis.log
    for _ in $(seq 1 30); do redis_ok && break; sleep 0.2; done
  fi
  redis_ok || { say "Redis is not reachable on 127.0.0.1:6379"; return 1; }
  export HOOKFLEET_REDIS="redis://127.0.0.1:6379"
}

# A Postgres URL for database $1 on the admin server.
pg_url_for() {
  local base=${HOOKFLEET_PG_ADMIN%/*}
  printf '%s/%s' "$base" "$1"
}

ensure_services() {
  ensure_build_deps && ensure_postgres && ensure_redis
}

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hookfleet/target}"
