#!/usr/bin/env bash
# Runs an Apache Kafka CLI tool from the jars that `stack.sh up` fetched, so nobody needs the
# Kafka tarball (it cannot be downloaded here) to inspect the local broker:
#   deploy/local/kafka-cli.sh kafka-topics --bootstrap-server 127.0.0.1:19092 --list
#   deploy/local/kafka-cli.sh kafka-console-consumer --bootstrap-server 127.0.0.1:19092 --topic t --from-beginning --max-messages 1
#   deploy/local/kafka-cli.sh kafka-consumer-groups --bootstrap-server 127.0.0.1:19092 --describe --group g
# The first argument may also be a fully qualified main class.
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  echo "usage: $0 <tool> [args...]" >&2
  echo "tools: kafka-topics kafka-console-consumer kafka-console-producer kafka-consumer-groups" >&2
  echo "       kafka-broker-api-versions kafka-configs kafka-get-offsets kafka-delete-records" >&2
  echo "       kafka-metadata-quorum kafka-transactions kafka-acls kafka-log-dirs kafka-storage" >&2
  echo "       kafka-producer-perf-test kafka-consumer-perf-test kafka-leader-election, or a main class" >&2
  exit 2
}

[[ $# -ge 1 ]] || usage
tool="$1"; shift
tool="${tool%.sh}"   # accept the distribution's script names too (kafka-topics.sh)

# Main classes verified with `unzip -l` in kafka-tools / kafka_2.13 $KAFKA_VERSION.
case "$tool" in
  kafka-topics)               main=org.apache.kafka.tools.TopicCommand ;;
  kafka-console-consumer)     main=org.apache.kafka.tools.consumer.ConsoleConsumer ;;
  kafka-console-producer)     main=org.apache.kafka.tools.ConsoleProducer ;;
  kafka-consumer-groups)      main=org.apache.kafka.tools.consumer.group.ConsumerGroupCommand ;;
  kafka-broker-api-versions)  main=org.apache.kafka.tools.BrokerApiVersionsCommand ;;
  kafka-configs)              main=org.apache.kafka.tools.ConfigCommand ;;
  kafka-get-offsets)          main=org.apache.kafka.tools.GetOffsetShell ;;
  kafka-delete-records)       main=org.apache.kafka.tools.DeleteRecordsCommand ;;
  kafka-metadata-quorum)      main=org.apache.kafka.tools.MetadataQuorumCommand ;;
  kafka-transactions)         main=org.apache.kafka.tools.TransactionsCommand ;;
  kafka-acls)                 main=org.apache.kafka.tools.AclCommand ;;
  kafka-log-dirs)             main=org.apache.kafka.tools.LogDirsCommand ;;
  kafka-leader-election)      main=org.apache.kafka.tools.LeaderElectionCommand ;;
  kafka-producer-perf-test)   main=org.apache.kafka.tools.ProducerPerformance ;;
  kafka-consumer-perf-test)   main=org.apache.kafka.tools.ConsumerPerformance ;;
  kafka-storage)              main=kafka.tools.StorageTool ;;
  -h|--help|help)             usage ;;
  *.*)                        main="$tool" ;;
  *) echo "kafka-cli: unknown tool '$tool'" >&2; usage ;;
esac

if [[ ! -f "$KAFKA_LIBS/.complete" ]]; then
  echo "kafka-cli: Kafka $KAFKA_VERSION jars not found in $KAFKA_LIBS; run 'bash deploy/local/stack.sh up' first" >&2
  exit 1
fi

# Tools are short-lived: a small serial-GC heap and C1 only start faster on a shared 2-core box.
# Their log4j2 config sends WARN and worse to stderr, like the distribution's tools-log4j2.yaml,
# so stdout carries only the tool's own output (console consumer records, topic lists).
exec java -Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true \
  -Dlog4j2.configurationFile="$LOCAL_DIR/kafka/tools-log4j2.properties" \
  -cp "$KAFKA_LIBS/*" "$main" "$@"
