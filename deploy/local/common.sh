# shellcheck shell=bash
# Paths and versions shared by stack.sh and kafka-cli.sh. Sourced, never run.

LOCAL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$LOCAL_DIR/../.." && pwd)"
RUN_DIR="$LOCAL_DIR/.run"          # pids, markers, logs, data: ignored by git
KAFKA_POM="$LOCAL_DIR/kafka/pom.xml"

# The pom is the single source of the Kafka version, so the cache folder can never disagree
# with what Maven fetched.
KAFKA_VERSION="$(sed -n 's:.*<kafka\.version>\(.*\)</kafka\.version>.*:\1:p' "$KAFKA_POM" | head -n1)"
KAFKA_CACHE="$REPO_ROOT/.cache/kafka/$KAFKA_VERSION"
KAFKA_LIBS="$KAFKA_CACHE/libs"

PG_VERSION=15
PG_CLUSTER=main
PG_ADDR=127.0.0.1:5432
REDIS_HOST=127.0.0.1
REDIS_PORT=6379
KAFKA_HOST=127.0.0.1
KAFKA_PORT=19092
KAFKA_CONTROLLER_PORT=19093
