#!/usr/bin/env bash
# Local development/test stack without Docker: PostgreSQL 15, Redis and a single-node Apache
# Kafka 4.x broker (KRaft), all on loopback, for `make test`, CI and every engineer's tests.
#
#   bash deploy/local/stack.sh up       # install what is missing, start what is not running, wait
#   bash deploy/local/stack.sh status   # one line per service; exit 0 only if all are up
#   bash deploy/local/stack.sh down     # stop only what `up` started
#
# Addresses (the same as deploy/docker-compose.yml):
#   postgres://postgres:postgres@127.0.0.1:5432/postgres?sslmode=disable
#   redis://127.0.0.1:6379
#   Redis Cluster (three masters, no replicas) redis://127.0.0.1:17001,redis://127.0.0.1:17002,redis://127.0.0.1:17003
#   Kafka 127.0.0.1:19092 (controller 127.0.0.1:19093), auto topic creation off
#
# It also installs the prometheus package for promtool (make test checks the alert rules with it); it
# starts no Prometheus. And a Python venv in .cache/pyvenv/ (Debian's python3 and python3-venv) holding
# the Standard Webhooks library from PyPI, with which the worker tests verify real deliveries.
#
# Runs as root on Debian 12 (no systemd). Safe to run again while everything is up. State,
# logs and "started by us" markers live in deploy/local/.run/, the Kafka jars in
# .cache/kafka/<version>/ at the repo root (both ignored by git).
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

PG_CONF_DIR="/etc/postgresql/$PG_VERSION/$PG_CLUSTER"
PG_DROPIN="$PG_CONF_DIR/conf.d/90-speculapro-local.conf"
PG_URL="postgres://postgres:postgres@$PG_ADDR/postgres?sslmode=disable"
PG_STARTED="$RUN_DIR/postgres.started"

REDIS_PID="$RUN_DIR/redis.pid"
REDIS_LOG="$RUN_DIR/redis.log"

# The Redis Cluster the stream's totals are tested on (internal/features, testenv.RedisClusterURL).
REDIS_CLUSTER_PORTS=(17001 17002 17003)
REDIS_CLUSTER_DIR="$RUN_DIR/redis-cluster"
REDIS_CLUSTER_WAIT=30

KAFKA_RUN="$RUN_DIR/kafka"
KAFKA_DATA="$KAFKA_RUN/data"
KAFKA_PROPS="$KAFKA_RUN/server.properties"
KAFKA_PROPS_TEMPLATE="$LOCAL_DIR/kafka/server.properties.template"
KAFKA_PID="$RUN_DIR/kafka.pid"
KAFKA_LOG="$RUN_DIR/kafka.log"   # the broker's log4j2 log (rolled by size)
KAFKA_OUT="$RUN_DIR/kafka.out"   # the JVM's own stdout/stderr: crashes, bad options
KAFKA_ADDR="$KAFKA_HOST:$KAFKA_PORT"

# Bounds for every wait, in seconds.
PG_WAIT=60
REDIS_WAIT=20
KAFKA_WAIT=180   # a JVM start takes ~10s idle, but over 60s when the 2 cores are saturated by tests
KAFKA_STOP_WAIT=45
MVN_WAIT=900

# The receivers' library the webhook tests verify deliveries with (tests/worker_stdwebhooks_test.go).
STANDARDWEBHOOKS_VERSION=1.1.0
PYVENV="$REPO_ROOT/.cache/pyvenv"

log() { printf 'stack: %s\n' "$*"; }
die() { printf 'stack: ERROR: %s\n' "$*" >&2; exit 1; }
have() { command -v "$1" >/dev/null 2>&1; }

# pid_alive FILE PATTERN: the pid recorded in FILE is running and its command line contains
# PATTERN (after a reboot or a long pause the pid may belong to some other process by now).
pid_alive() {
  local pid
  [[ -f "$1" ]] || return 1
  pid="$(cat "$1" 2>/dev/null || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null &&
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$2"
}

# wait_for SECONDS WHAT CMD...: retries CMD every half second until it succeeds or time is up.
wait_for() {
  local limit="$1" what="$2"; shift 2
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      printf 'stack: ERROR: %s did not answer within %ss\n' "$what" "$limit" >&2
      return 1
    fi
    sleep 0.5
  done
}

# ---------------------------------------------------------------------------------------------
# Packages

java_major() {
  java -XshowSettings:properties -version 2>&1 |
    awk -F'= ' '/java.specification.version/ {split($2, v, "."); print (v[1] == "1" ? v[2] : v[1])}'
}

# Installs only what is missing, so a warm `up` never touches apt (and never needs the network).
ensure_packages() {
  local need=()
  { have pg_ctlcluster && [[ -x /usr/lib/postgresql/$PG_VERSION/bin/postgres ]] && have pg_isready; } ||
    need+=(postgresql)
  { have redis-server && have redis-cli; } || need+=(redis-server)
  have kcat || need+=(kcat)
  have mvn || need+=(maven)
  # Kafka 4.x brokers and tools need Java 17 or newer.
  if ! have java || (($(java_major || echo 0) < 17)); then need+=(openjdk-17-jre-headless); fi
  # promtool checks and unit-tests deploy/observability/alerts.yaml; the observability test runs
  # its own prometheus on a free port.
  { have prometheus && have promtool; } || need+=(prometheus)
  # Debian's python3 makes venvs only with python3-venv (ensurepip); a pyenv python3 on PATH is not used.
  { [[ -x /usr/bin/python3 ]] && /usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null; } || need+=(python3-venv)
  ((${#need[@]} == 0)) && return 0

  log "installing missing packages: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || die "apt-get update failed"
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null ||
    die "apt-get install ${need[*]} failed"
  if [[ " ${need[*]} " == *" prometheus "* ]]; then stop_packaged_prometheus; fi
}

# The Debian package starts a Prometheus service on :9090 and enables it at boot wherever an init
# system lets it. Nothing here uses that one, so the one just installed is stopped and disabled.
stop_packaged_prometheus() {
  if have systemctl && [[ -d /run/systemd/system ]]; then
    systemctl disable --now prometheus.service >/dev/null 2>&1 || true
  elif [[ -x /etc/init.d/prometheus ]]; then
    /etc/init.d/prometheus stop >/dev/null 2>&1 || true
    have update-rc.d && { update-rc.d prometheus disable >/dev/null 2>&1 || true; }
  fi
}

# The venv with the pinned standardwebhooks: made or repaired only when the library is not there
# at that version, so a warm `up` never touches PyPI.
ensure_pyvenv() {
  local want="$STANDARDWEBHOOKS_VERSION"
  [[ -x "$PYVENV/bin/python" ]] && "$PYVENV/bin/python" -c \
    'import importlib.metadata as m, sys; sys.exit(m.version("standardwebhooks") != sys.argv[1])' "$want" 2>/dev/null &&
    return 0
  log "installing standardwebhooks $want into $PYVENV"
  mkdir -p "$(dirname "$PYVENV")"
  /usr/bin/python3 -m venv "$PYVENV" || die "python3 -m venv $PYVENV failed (Debian package python3-venv)"
  "$PYVENV/bin/python" -m pip install --quiet --disable-pip-version-check "standardwebhooks==$want" ||
    die "pip install standardwebhooks==$want into $PYVENV failed"
}

# A second message locale, so tests can prove that nothing classifies PostgreSQL's errors by their
# (translated) text: TestClassifyInGerman sets lc_messages to it. localedef needs no network; the
# locales package is installed only when missing. --no-archive writes /usr/lib/locale/de_DE.utf8/,
# which a PostgreSQL already running finds at once (a locale added to the archive is not seen by a
# postmaster that looked there before).
ensure_test_locale() {
  [[ -d /usr/lib/locale/de_DE.utf8 ]] && return 0
  if ! have localedef || [[ ! -d /usr/share/i18n/locales ]]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq || die "apt-get update failed"
    apt-get install -y -qq --no-install-recommends locales >/dev/null || die "apt-get install locales failed"
  fi
  log "generating the de_DE.UTF-8 locale (for PostgreSQL's translated messages)"
  localedef --no-archive -i de_DE -f UTF-8 de_DE.UTF-8 || die "localedef de_DE.UTF-8 failed"
}

# ---------------------------------------------------------------------------------------------
# PostgreSQL 15, through Debian's cluster tooling (pg_ctlcluster works as root without systemd).

pg_running() { pg_lsclusters --no-header 2>/dev/null | awk -v v="$PG_VERSION" -v c="$PG_CLUSTER" '$1 == v && $2 == c && $4 ~ /^online/ {ok=1} END {exit !ok}'; }
pg_ready() { pg_isready -q -h 127.0.0.1 -p "${PG_ADDR##*:}" -t 2; }
# From /: psql as postgres otherwise warns "could not change directory" when the checkout is private (mktemp -d).
pg_superuser_sql() { (cd / && runuser -u postgres -- psql -X -q -tA -p "${PG_ADDR##*:}" -d postgres -c "$1"); }
pg_password_login() { PGPASSWORD=postgres PGCONNECT_TIMEOUT=5 psql -X -q -tA "$PG_URL" -c 'select 1' >/dev/null 2>&1; }

pg_up() {
  if ! pg_lsclusters --no-header 2>/dev/null | awk -v v="$PG_VERSION" -v c="$PG_CLUSTER" '$1 == v && $2 == c {ok=1} END {exit !ok}'; then
    log "postgres: creating cluster $PG_VERSION/$PG_CLUSTER"
    pg_createcluster "$PG_VERSION" "$PG_CLUSTER" --port "${PG_ADDR##*:}" >/dev/null ||
      die "pg_createcluster $PG_VERSION $PG_CLUSTER failed"
  fi

  # Tests of several packages run at once, each with its own pool: 100 connections is not enough.
  # pg_stat_statements is preloaded so benchmarks can say which statements PostgreSQL spends its
  # time on (CREATE EXTENSION pg_stat_statements in the database to read it); preloading takes
  # effect when the server starts, so a running one keeps going without it until its next start.
  # A drop-in this script owns keeps Debian's postgresql.conf untouched.
  local want
  want="$(printf '%s\n' \
    '# Owned by deploy/local/stack.sh (rewritten on every `up`); remove it to restore the defaults.' \
    'max_connections = 300' \
    "shared_preload_libraries = 'pg_stat_statements'")"
  mkdir -p "$PG_CONF_DIR/conf.d"
  if [[ "$(cat "$PG_DROPIN" 2>/dev/null || true)" != "$want" ]]; then
    printf '%s\n' "$want" >"$PG_DROPIN"
  fi

  if ! pg_running; then
    log "postgres: starting cluster $PG_VERSION/$PG_CLUSTER"
    # setsid: the postmaster must not die with the caller's process group (a killed test run).
    setsid pg_ctlcluster "$PG_VERSION" "$PG_CLUSTER" start 9>&- ||
      die "pg_ctlcluster $PG_VERSION $PG_CLUSTER start failed; see /var/log/postgresql/postgresql-$PG_VERSION-$PG_CLUSTER.log"
    touch "$PG_STARTED"
  fi
  wait_for "$PG_WAIT" "postgres at $PG_ADDR" pg_ready || {
    tail -n 20 "/var/log/postgresql/postgresql-$PG_VERSION-$PG_CLUSTER.log" >&2 || true
    exit 1
  }

  # max_connections only changes on restart; restart only when it is actually too low, so a
  # repeated `up` never drops the connections of tests that are running.
  local maxconn
  maxconn="$(pg_superuser_sql 'show max_connections')" || die "postgres: cannot query max_connections as superuser"
  if ((maxconn < 300)); then
    log "postgres: restarting to apply max_connections=300 (was $maxconn)"
    setsid pg_ctlcluster "$PG_VERSION" "$PG_CLUSTER" restart 9>&- || die "pg_ctlcluster restart failed"
    wait_for "$PG_WAIT" "postgres at $PG_ADDR" pg_ready || exit 1
  fi

  # Debian's pg_hba.conf already allows scram-sha-256 logins on 127.0.0.1; the superuser just has
  # no password yet on a fresh cluster.
  if ! pg_password_login; then
    pg_superuser_sql "alter role postgres with password 'postgres'" >/dev/null ||
      die "postgres: setting the superuser password failed"
    pg_password_login ||
      die "postgres: password login on $PG_ADDR still fails; check host lines in $PG_CONF_DIR/pg_hba.conf"
  fi
  log "postgres: up  $PG_URL  (${SECONDS}s)"
}

pg_down() {
  if [[ ! -f "$PG_STARTED" ]]; then
    pg_running && log "postgres: left running (not started by stack.sh)"
    return 0
  fi
  if pg_running; then
    log "postgres: stopping cluster $PG_VERSION/$PG_CLUSTER"
    pg_ctlcluster "$PG_VERSION" "$PG_CLUSTER" stop -m fast || die "pg_ctlcluster stop failed"
  fi
  rm -f "$PG_STARTED"
}

# ---------------------------------------------------------------------------------------------
# Redis

# timeout: a redis that accepts but never answers must not hold wait_for past its bound.
redis_ready() { [[ "$(timeout 5 redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" ping 2>/dev/null)" == PONG ]]; }

redis_up() {
  if redis_ready; then
    pid_alive "$REDIS_PID" redis-server || log "redis: already answering on $REDIS_HOST:$REDIS_PORT (not started by stack.sh)"
  else
    mkdir -p "$RUN_DIR/redis"
    rm -f "$REDIS_PID"
    # No persistence: test data is throwaway, and snapshots would only cost disk and CPU.
    # --daemonize detaches (setsid) so Redis outlives the shell that started it.
    redis-server --daemonize yes --bind "$REDIS_HOST" --port "$REDIS_PORT" \
      --pidfile "$REDIS_PID" --logfile "$REDIS_LOG" --dir "$RUN_DIR/redis" \
      --save '' --appendonly no 9>&- ||
      die "redis-server failed to start; see $REDIS_LOG"
    wait_for "$REDIS_WAIT" "redis at $REDIS_HOST:$REDIS_PORT" redis_ready || {
      tail -n 20 "$REDIS_LOG" >&2 || true
      exit 1
    }
  fi
  log "redis: up  redis://$REDIS_HOST:$REDIS_PORT  (${SECONDS}s)"
}

redis_down() {
  if ! pid_alive "$REDIS_PID" redis-server; then
    rm -f "$REDIS_PID"
    redis_ready && log "redis: left running (not started by stack.sh)"
    return 0
  fi
  local pid
  pid="$(cat "$REDIS_PID")"
  log "redis: stopping (pid $pid)"
  kill "$pid"
  wait_for 20 "redis shutdown" bash -c "! kill -0 $pid" || kill -9 "$pid" 2>/dev/null || true
  rm -f "$REDIS_PID"
}

# ---------------------------------------------------------------------------------------------
# Redis Cluster: three masters on loopback, no replicas, each in its own dir under the run dir.

rc_ready_node() { [[ "$(timeout 5 redis-cli -h "$REDIS_HOST" -p "$1" ping 2>/dev/null)" == PONG ]]; }
rc_state_ok() { timeout 5 redis-cli -h "$REDIS_HOST" -p "${REDIS_CLUSTER_PORTS[0]}" cluster info 2>/dev/null | grep -q '^cluster_state:ok'; }
rc_url() {
  local p out=()
  for p in "${REDIS_CLUSTER_PORTS[@]}"; do out+=("redis://$REDIS_HOST:$p"); done
  (IFS=,; echo "${out[*]}")
}

redis_cluster_up() {
  local p dir
  for p in "${REDIS_CLUSTER_PORTS[@]}"; do
    dir="$REDIS_CLUSTER_DIR/$p"
    if rc_ready_node "$p"; then
      pid_alive "$dir/redis.pid" redis-server || log "redis-cluster: $p already answering (not started by stack.sh)"
      continue
    fi
    mkdir -p "$dir"
    rm -f "$dir/redis.pid"
    # nodes.conf in the node's own dir keeps the cluster's identity across restarts.
    redis-server --daemonize yes --bind "$REDIS_HOST" --port "$p" \
      --cluster-enabled yes --cluster-config-file "$dir/nodes.conf" --cluster-node-timeout 5000 \
      --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" --dir "$dir" \
      --save '' --appendonly no 9>&- ||
      die "redis-server (cluster node $p) failed to start; see $dir/redis.log"
  done
  for p in "${REDIS_CLUSTER_PORTS[@]}"; do
    wait_for "$REDIS_WAIT" "redis cluster node $REDIS_HOST:$p" rc_ready_node "$p" || {
      tail -n 20 "$REDIS_CLUSTER_DIR/$p/redis.log" >&2 || true
      exit 1
    }
  done
  # Create the cluster only when no slot is assigned yet: a restarted node keeps its nodes.conf.
  if ! timeout 5 redis-cli -h "$REDIS_HOST" -p "${REDIS_CLUSTER_PORTS[0]}" cluster info 2>/dev/null | grep -q '^cluster_slots_assigned:16384'; then
    local addrs=()
    for p in "${REDIS_CLUSTER_PORTS[@]}"; do addrs+=("$REDIS_HOST:$p"); done
    log "redis-cluster: creating a cluster of ${#addrs[@]} masters"
    timeout 60 redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes >"$REDIS_CLUSTER_DIR/create.log" 2>&1 || {
      tail -n 20 "$REDIS_CLUSTER_DIR/create.log" >&2
      die "redis-cli --cluster create failed"
    }
  fi
  wait_for "$REDIS_CLUSTER_WAIT" "redis cluster state ok" rc_state_ok || exit 1
  log "redis-cluster: up  $(rc_url)  (${SECONDS}s)"
}

redis_cluster_down() {
  local p dir pid
  for p in "${REDIS_CLUSTER_PORTS[@]}"; do
    dir="$REDIS_CLUSTER_DIR/$p"
    if ! pid_alive "$dir/redis.pid" redis-server; then
      rm -f "$dir/redis.pid"
      rc_ready_node "$p" && log "redis-cluster: $p left running (not started by stack.sh)"
      continue
    fi
    pid="$(cat "$dir/redis.pid")"
    log "redis-cluster: stopping $p (pid $pid)"
    kill "$pid"
    wait_for 20 "redis cluster node shutdown" bash -c "! kill -0 $pid" || kill -9 "$pid" 2>/dev/null || true
    rm -f "$dir/redis.pid"
  done
}

# ---------------------------------------------------------------------------------------------
# Apache Kafka 4.x, single node, KRaft combined mode, run straight from Maven Central jars
# (the binary tarball cannot be downloaded here).

# kafka_ready: the broker answers a real Kafka metadata request and lists itself, which it only
# does once it has caught up with the KRaft metadata log (an open TCP port is not enough).
kafka_ready() {
  if have kcat; then
    kcat -L -b "$KAFKA_ADDR" -m 3 2>/dev/null | grep -q ' 1 brokers:'
  else
    (exec 3<>"/dev/tcp/$KAFKA_HOST/$KAFKA_PORT") 2>/dev/null
  fi
}

kafka_fetch_libs() {
  [[ -n "$KAFKA_VERSION" ]] || die "cannot read kafka.version from $KAFKA_POM"
  [[ -f "$KAFKA_LIBS/.complete" ]] && return 0
  log "kafka: fetching Apache Kafka $KAFKA_VERSION jars with Maven into $KAFKA_LIBS"
  # Download into a fresh folder and rename at the end, so an interrupted download never looks
  # complete and stale jars of an earlier attempt never end up on the classpath.
  # Maven's output goes to a file and is shown only on failure (it is noisy even with -q).
  local tmp="$KAFKA_CACHE/libs.tmp.$$" mvn_log="$KAFKA_CACHE/mvn.log"
  rm -rf "$tmp" "$KAFKA_LIBS"
  mkdir -p "$KAFKA_CACHE"
  if ! timeout "$MVN_WAIT" mvn -B -Dstyle.color=never -f "$KAFKA_POM" dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$tmp" >"$mvn_log" 2>&1; then
    rm -rf "$tmp"
    grep -E 'ERROR|FAIL' "$mvn_log" | tail -n 15 >&2 || tail -n 15 "$mvn_log" >&2
    die "Maven could not fetch the Kafka $KAFKA_VERSION jars (limit ${MVN_WAIT}s); full output in $mvn_log"
  fi
  touch "$tmp/.complete"
  mv "$tmp" "$KAFKA_LIBS"
}

# kafka_write_config: the shared broker's properties from the template PrivateKafka also reads
# (one source for both), on the stack's ports and data dir.
kafka_write_config() {
  mkdir -p "$KAFKA_DATA"
  local props
  props="$(<"$KAFKA_PROPS_TEMPLATE")" || die "kafka: cannot read $KAFKA_PROPS_TEMPLATE"
  props="${props//@PLAINTEXT_ADDR@/$KAFKA_ADDR}"
  props="${props//@CONTROLLER_ADDR@/$KAFKA_HOST:$KAFKA_CONTROLLER_PORT}"
  props="${props//@LOG_DIRS@/$KAFKA_DATA}"
  props="${props//@INTERNAL_TOPIC_PARTITIONS@/10}"
  props="${props//@IO_THREADS@/4}"
  props="${props//@RECOVERY_THREADS@/2}"
  [[ "$props" =~ @[A-Z_]+@ ]] && die "kafka: $KAFKA_PROPS_TEMPLATE has a value stack.sh does not fill in: ${BASH_REMATCH[0]}"
  printf '# Generated by deploy/local/stack.sh on every start from %s.\n%s\n' "$KAFKA_PROPS_TEMPLATE" "$props" >"$KAFKA_PROPS"
}

kafka_format() {
  [[ -f "$KAFKA_DATA/meta.properties" ]] && return 0
  log "kafka: formatting storage in $KAFKA_DATA"
  local cluster_id
  cluster_id="$(java -cp "$KAFKA_LIBS/*" -Dlog4j2.configurationFile="$LOCAL_DIR/kafka/tools-log4j2.properties" \
    kafka.tools.StorageTool random-uuid)" || die "kafka: StorageTool random-uuid failed"
  java -cp "$KAFKA_LIBS/*" -Dlog4j2.configurationFile="$LOCAL_DIR/kafka/tools-log4j2.properties" \
    kafka.tools.StorageTool format --standalone -t "$cluster_id" -c "$KAFKA_PROPS" >/dev/null ||
    die "kafka: StorageTool format failed"
}

# kafka_tail_logs: what went wrong, for an `up` that failed. The broker keeps logging after a
# fatal error, so its errors are picked out before the plain tail.
kafka_tail_logs() {
  {
    echo "--- errors in $KAFKA_LOG:"
    tail -n +"${KAFKA_LOG_FROM:-1}" "$KAFKA_LOG" 2>/dev/null |
      grep -E '^\[.*\] (ERROR|FATAL)|^Caused by' | tail -n 8 | cut -c1-400
    echo "--- last lines of $KAFKA_LOG:"
    tail -n 15 "$KAFKA_LOG" 2>/dev/null | cut -c1-400
    if [[ -s "$KAFKA_OUT" ]]; then echo "--- $KAFKA_OUT:"; tail -n 10 "$KAFKA_OUT"; fi
  } >&2 || true
}

kafka_up() {
  # The jars also serve kafka-cli.sh (tests use Kafka's own console tools), so
  # fetch them even when some other broker already answers on the address.
  kafka_fetch_libs
  if pid_alive "$KAFKA_PID" kafka.Kafka; then
    : # ours and running (possibly still starting): just wait below
  elif kafka_ready; then
    log "kafka: already answering on $KAFKA_ADDR (not started by stack.sh)"
    log "kafka: up  $KAFKA_ADDR"
    return 0
  else
    rm -f "$KAFKA_PID"
    kafka_write_config
    kafka_format
    log "kafka: starting Apache Kafka $KAFKA_VERSION (log: $KAFKA_LOG)"
    # The log is appended to across starts: remember where this start begins, so a failure report
    # shows this start's errors, not an earlier one's.
    KAFKA_LOG_FROM=1
    if [[ -f "$KAFKA_LOG" ]]; then KAFKA_LOG_FROM=$(($(wc -l <"$KAFKA_LOG") + 1)); fi
    # setsid: the broker must outlive the shell (and process group) that ran `up`.
    setsid java -Xms256m -Xmx768m -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
      -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent \
      -XX:+ExitOnOutOfMemoryError \
      -Djava.awt.headless=true \
      -Dlog4j2.configurationFile="$LOCAL_DIR/kafka/broker-log4j2.properties" \
      -Dkafka.logs.dir="$RUN_DIR" \
      -cp "$KAFKA_LIBS/*" kafka.Kafka "$KAFKA_PROPS" \
      </dev/null >"$KAFKA_OUT" 2>&1 9>&- &
    echo $! >"$KAFKA_PID"
  fi

  local deadline=$((SECONDS + KAFKA_WAIT))
  until kafka_ready; do
    if ! pid_alive "$KAFKA_PID" kafka.Kafka; then
      echo "stack: ERROR: kafka exited during startup" >&2
      kafka_tail_logs
      rm -f "$KAFKA_PID"
      exit 1
    fi
    if ((SECONDS >= deadline)); then
      echo "stack: ERROR: kafka at $KAFKA_ADDR did not answer a metadata request within ${KAFKA_WAIT}s" >&2
      kafka_tail_logs
      exit 1
    fi
    sleep 1
  done
  log "kafka: up  $KAFKA_ADDR  (${SECONDS}s)"
}

kafka_down() {
  if ! pid_alive "$KAFKA_PID" kafka.Kafka; then
    rm -f "$KAFKA_PID"
    kafka_ready && log "kafka: left running (not started by stack.sh)"
    return 0
  fi
  local pid
  pid="$(cat "$KAFKA_PID")"
  log "kafka: stopping (pid $pid)"
  # SIGTERM runs the broker's controlled shutdown, which keeps the next start quick (no log
  # recovery). Bounded: a broker stuck in shutdown is killed.
  kill "$pid"
  if ! wait_for "$KAFKA_STOP_WAIT" "kafka shutdown" bash -c "! kill -0 $pid"; then
    log "kafka: still running after ${KAFKA_STOP_WAIT}s, killing"
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$KAFKA_PID"
}

# ---------------------------------------------------------------------------------------------

status() {
  local rc=0 state
  line() { printf '%-13s %-5s %s\n' "$1" "$2" "$3"; }
  if have pg_isready && pg_ready; then state=up; else state=down; rc=1; fi
  line postgres "$state" "$PG_URL"
  if have redis-cli && redis_ready; then state=up; else state=down; rc=1; fi
  line redis "$state" "redis://$REDIS_HOST:$REDIS_PORT"
  if have redis-cli && rc_state_ok; then state=up; else state=down; rc=1; fi
  line redis-cluster "$state" "$(rc_url)"
  if kafka_ready; then state=up; else state=down; rc=1; fi
  line kafka "$state" "$KAFKA_ADDR"
  return "$rc"
}

# Serialises concurrent `up`/`down` runs (several engineers, CI); `status` needs no lock.
# Every long-lived process is started with `9>&-`: a daemon inheriting fd 9 would hold the
# lock for its whole life and block every later `up`/`down`.
lock() {
  mkdir -p "$RUN_DIR"
  exec 9>"$RUN_DIR/stack.lock"
  flock -w 600 9 || die "another stack.sh up/down is still running (waited 600s for $RUN_DIR/.lock)"
}

main() {
  case "${1:-}" in
    up)
      [[ $EUID -eq 0 ]] || die "run as root (apt-get, pg_ctlcluster)"
      lock
      ensure_packages
      ensure_pyvenv
      ensure_test_locale
      pg_up
      redis_up
      redis_cluster_up
      kafka_up
      ;;
    down)
      lock
      kafka_down
      redis_cluster_down
      redis_down
      pg_down
      ;;
    status) status ;;   # exit 0 only when all answer
    *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
  esac
}

# Sourcing the file (for testing its functions) does not run anything.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  main "$@"
fi
