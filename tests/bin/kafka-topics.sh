#!/usr/bin/env bash
# A stand-in for Apache Kafka's bin/kafka-topics.sh, over `kaas topics`, for librdkafka's
# test suite (test_kafka_topics() runs "$KAFKA_PATH/bin/kafka-topics.sh --bootstrap-server
# $BROKERS ..."; 0077 creates its topics so). Point KAFKA_PATH at this directory's parent
# (tests/). The flags Apache's script takes and librdkafka's tests send:
#   --create --topic T [--partitions N] [--replication-factor R] [--config K=V]... [--if-not-exists]
#   --delete --topic T [--if-exists]
#   --list, --describe [--topic T]
#   --alter --topic T --partitions N (kaas topics alter; --config K=V sets overrides there too)
# The kaas command is $KAAS, else the repository's .venv/bin/kaas, else `kaas` on PATH.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
kaas="${KAAS:-}"
if [[ -z "$kaas" ]]; then
  if [[ -x "$here/../../.venv/bin/kaas" ]]; then kaas="$here/../../.venv/bin/kaas"; else kaas=kaas; fi
fi
die() { echo "kafka-topics.sh (kaas stand-in): $*" >&2; exit 1; }

action="" bootstrap="" topic="" command_config=""
create_args=() flag_args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bootstrap-server) bootstrap="$2"; shift 2 ;;
    --command-config) command_config="$2"; shift 2 ;;
    --create|--delete|--list|--describe|--alter) [[ -z "$action" ]] || die "one action only"; action="${1#--}"; shift ;;
    --topic) topic="$2"; shift 2 ;;
    --partitions|--replication-factor) create_args+=("$1" "$2"); shift 2 ;;
    --config) create_args+=(--config "$2"); shift 2 ;;
    --if-not-exists|--if-exists) flag_args+=("$1"); shift ;;
    --zookeeper) die "--zookeeper: kaas has no ZooKeeper; set TEST_KAFKA_VERSION >= 3.0 (then BROKERS is used)" ;;
    *) die "unsupported argument: $1" ;;
  esac
done
[[ -n "$bootstrap" ]] || die "--bootstrap-server is required"
common=(--bootstrap "$bootstrap")
[[ -z "$command_config" ]] || common+=(--command-config "$command_config")

case "$action" in
  create)
    [[ -n "$topic" ]] || die "--create needs --topic"
    exec "$kaas" topics create "$topic" ${create_args[@]+"${create_args[@]}"} ${flag_args[@]+"${flag_args[@]}"} "${common[@]}" ;;
  delete)
    [[ -n "$topic" ]] || die "--delete needs --topic"
    exec "$kaas" topics delete "$topic" ${flag_args[@]+"${flag_args[@]}"} "${common[@]}" ;;
  list) exec "$kaas" topics list "${common[@]}" ;;
  describe)
    if [[ -n "$topic" ]]; then exec "$kaas" topics describe "$topic" "${common[@]}"; fi
    exec "$kaas" topics describe "${common[@]}" ;;
  alter)
    [[ -n "$topic" ]] || die "--alter needs --topic"
    exec "$kaas" topics alter "$topic" ${create_args[@]+"${create_args[@]}"} "${common[@]}" ;;
  *) die "one of --create, --delete, --list, --describe, --alter is required" ;;
esac
