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

# $1 loopback ports, each free along with port + 10000 (a Redis Cluster
# node's bus), space-separated: chosen by the kernel, so concurrent runs and
# other servers are never disturbed.
spare_ports() {
  python3 - "$1" <<'PY'
import socket, sys
out, held = [], []
while len(out) < int(sys.argv[1]):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; held.append(s)
    if port + 10000 > 65535:
        continue
    b = socket.socket()
    try:
        b.bind(("127.0.0.1", port + 10000))
    except OSError:
        continue
    held.append(b); out.append(port)
print(" ".join(map(str, out)))
PY
}

# A three-node Redis Cluster on spare loopback ports (and their bus ports
# +10000), nothing on disk, in a fresh directory: for the test run's
# cluster pass and the cluster benchmarks. Exports
# HOOKFLEET_REDIS_CLUSTER_URLS (the seed URLs, comma-separated);
# stop_redis_cluster shuts it down.
start_redis_cluster() {
  command -v redis-server >/dev/null || apt_install redis-server redis-tools
  local dir p nodes=() urls=() ports
  ports=$(spare_ports 3)
  dir=$(mktemp -d /tmp/hookfleet-cluster.XXXXXX)
  HOOKFLEET_CLUSTER_DIR=$dir
  HOOKFLEET_CLUSTER_PORTS=$ports
  for p in $ports; do
    mkdir -p "$dir/$p"
    redis-server --daemonize yes --bind 127.0.0.1 --port "$p" --save "" --appendonly no \
      --cluster-enabled yes --cluster-config-file "$dir/$p/nodes.conf" --cluster-node-timeout 5000 \
      --dir "$dir/$p" --logfile "$dir/$p/redis.log" --pidfile "$dir/$p/redis.pid"
    nodes+=("127.0.0.1:$p")
    urls+=("redis://127.0.0.1:$p")
  done
  for p in $ports; do
    for _ in $(seq 1 50); do redis-cli -p "$p" ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
  done
  redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >/dev/null
  for p in $ports; do
    for _ in $(seq 1 100); do
      redis-cli -p "$p" cluster info 2>/dev/null | grep -q 'cluster_state:ok' && break; sleep 0.1
    done
    redis-cli -p "$p" cluster info | grep -q 'cluster_state:ok' ||
      { say "Redis Cluster node $p is not ready"; return 1; }
  done
  HOOKFLEET_REDIS_CLUSTER_URLS=$(IFS=,; echo "${urls[*]}")
  export HOOKFLEET_REDIS_CLUSTER_URLS HOOKFLEET_CLUSTER_DIR HOOKFLEET_CLUSTER_PORTS
  say "Redis Cluster on ${nodes[*]}"
}

stop_redis_cluster() {
  [ -n "${HOOKFLEET_CLUSTER_DIR:-}" ] || return 0
  local p
  for p in ${HOOKFLEET_CLUSTER_PORTS:-}; do
    redis-cli -p "$p" shutdown nosave >/dev/null 2>&1 || true
  done
  rm -rf "$HOOKFLEET_CLUSTER_DIR"
  unset HOOKFLEET_CLUSTER_DIR
}

# PgBouncer (Debian's package) in transaction pooling mode on a spare
# loopback port, in front of the admin server, any
# database name passed through, no prepared-statement support (1.18 has
# none): what a fleet sharing Postgres connections runs. Exports
# HOOKFLEET_PGBOUNCER_ADMIN (the admin URL through it); stop_pgbouncer stops
# it.
start_pgbouncer() {
  command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ] || apt_install pgbouncer
  local port dir bin user pass host pgport
  port=$(spare_ports 1)
  bin=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)
  dir=$(mktemp -d /tmp/hookfleet-pgbouncer.XXXXXX)
  # users.txt: the admin role and its password (decoded; a " doubled, as
  # PgBouncer reads it).
  read -r host pgport < <(python3 - "$HOOKFLEET_PG_ADMIN" "$dir/users.txt" <<'PY'
import sys, urllib.parse as u
p = u.urlsplit(sys.argv[1])
user = u.unquote(p.username or "postgres")
password = u.unquote(p.password or "")
q = lambda s: '"' + s.replace('"', '""') + '"'
open(sys.argv[2], "w").write(q(user) + " " + q(password) + "\n")
print(p.hostname or "127.0.0.1", p.port or 5432)
PY
)
  cat > "$dir/pgbouncer.ini" <<INI
[databases]
* = host=$host port=$pgport
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $dir/users.txt
pool_mode = transaction
max_client_conn = 2000
default_pool_size = 10
ignore_startup_parameters = extra_float_digits,options
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
INI
  # It refuses to run as root.
  if [ "$(id -u)" = 0 ]; then
    chown -R postgres "$dir"
    runuser -u postgres -- "$bin" -d "$dir/pgbouncer.ini"
  else
    "$bin" -d "$dir/pgbouncer.ini"
  fi
  for _ in $(seq 1 50); do pg_isready -q -h 127.0.0.1 -p "$port" 2>/dev/null && break; sleep 0.1; done
  pg_isready -q -h 127.0.0.1 -p "$port" || { say "PgBouncer is not reachable on 127.0.0.1:$port"; return 1; }
  HOOKFLEET_PGBOUNCER_DIR=$dir
  # The admin URL with the pooler's address (credentials kept as written).
  HOOKFLEET_PGBOUNCER_ADMIN=$(python3 - "$HOOKFLEET_PG_ADMIN" "$port" <<'PY'
import sys, urllib.parse as u
p = u.urlsplit(sys.argv[1])
cred = p.netloc.rsplit("@", 1)[0] + "@" if "@" in p.netloc else ""
print(p._replace(netloc=cred + "127.0.0.1:" + sys.argv[2]).geturl())
PY
)
  export HOOKFLEET_PGBOUNCER_ADMIN HOOKFLEET_PGBOUNCER_DIR
  say "PgBouncer (transaction pooling) on 127.0.0.1:$port"
}

stop_pgbouncer() {
  [ -n "${HOOKFLEET_PGBOUNCER_DIR:-}" ] || return 0
  [ -f "$HOOKFLEET_PGBOUNCER_DIR/pgbouncer.pid" ] && kill "$(cat "$HOOKFLEET_PGBOUNCER_DIR/pgbouncer.pid")" 2>/dev/null || true
  rm -rf "$HOOKFLEET_PGBOUNCER_DIR"
  unset HOOKFLEET_PGBOUNCER_DIR
}

# A Postgres URL for database $1 on the admin server.
pg_url_for() {
  local base=${HOOKFLEET_PG_ADMIN%/*}
  printf '%s/%s' "$base" "$1"
}

# Debian's Chromium and its chromedriver, for the console's browser tests
# (tests/console_browser.rs starts chromedriver on a free loopback port).
ensure_browser() {
  command -v dpkg >/dev/null || return 0
  apt_install chromium chromium-driver
}

# promtool, Prometheus's own checker (Debian's prometheus package carries
# it): the tests lint every process's scrape with it, and check-deploy
# checks and unit-tests the shipped alert rules.
ensure_promtool() {
  command -v promtool >/dev/null && return 0
  command -v dpkg >/dev/null || return 0
  apt_install prometheus
  # The package starts a Prometheus server where systemd runs; only its
  # promtool is wanted.
  if command -v systemctl >/dev/null && systemctl is-active -q prometheus 2>/dev/null; then
    as_root systemctl disable --now prometheus >/dev/null 2>&1 || true
  fi
}

ensure_services() {
  ensure_build_deps && ensure_postgres && ensure_redis
}

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hookfleet/target}"
