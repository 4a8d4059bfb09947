#!/usr/bin/env bash
# A real Kafka broker for tests: one KRaft node (broker + controller in one JVM) from the
# kafka_2.13 jars on Maven Central. Needs only java (17) and mvn.
#
#   tools/kafka-broker.sh [fetch]             download once; print the classpath file
#   tools/kafka-broker.sh cached              exit 0 if the jars are already here
#   tools/kafka-broker.sh format PROPS ID     format the log dirs of PROPS (cluster id ID)
#   tools/kafka-broker.sh run PROPS           exec the broker (kafka.Kafka PROPS)
#
# Jars go to ${ELASTICCTR_CACHE:-$HOME/.cache/elasticctr}/kafka-<version>/ (a Maven local
# repository there plus classpath.txt), outside the repo; a second run does not call Maven.
# The version is the one tools/standins/kafka builds into its image (KAFKA_VERSION).
set -euo pipefail

version=${KAFKA_VERSION:-4.1.1}
cache=${ELASTICCTR_CACHE:-$HOME/.cache/elasticctr}/kafka-$version
here=$(cd "$(dirname "$0")" && pwd)
# kafka_2.13 is the broker (kafka.Kafka) and its storage formatter; log4j 2 behind
# slf4j 2 is the logging the distribution ships (Maven's nearest-wins would pick an
# slf4j 1.7 api, which ignores the slf4j 2 binding).
artifacts=(
  "org.apache.kafka:kafka_2.13:$version"
  "org.slf4j:slf4j-api:2.0.17"
  "org.apache.logging.log4j:log4j-slf4j2-impl:2.25.3"
  "org.apache.logging.log4j:log4j-core:2.25.3"
)
# shellcheck source=lib/maven-classpath.sh
. "$here/lib/maven-classpath.sh"

java_run() {
  # log4j2.properties of the stand-in: everything to stderr at INFO, Kafka's chatty parts at WARN.
  exec java ${KAFKA_JAVA_OPTS:--Xmx256m -Xms64m} \
    -Dlog4j2.configurationFile="$here/standins/kafka/log4j2.properties" \
    -cp "$(maven_classpath_of "$cache")" "$@"
}

case "${1:-fetch}" in
  fetch | cached)
    maven_classpath "${1:-fetch}" "$cache" "${artifacts[@]}"
    ;;
  format)
    [ $# -eq 3 ] || { echo "usage: $0 format PROPS CLUSTER_ID" >&2; exit 2; }
    maven_classpath fetch "$cache" "${artifacts[@]}" >/dev/null
    java_run kafka.tools.StorageTool format --config "$2" --cluster-id "$3" --ignore-formatted
    ;;
  run)
    [ $# -eq 2 ] || { echo "usage: $0 run PROPS" >&2; exit 2; }
    maven_classpath fetch "$cache" "${artifacts[@]}" >/dev/null
    java_run kafka.Kafka "$2"
    ;;
  *)
    echo "usage: $0 [fetch | cached | format PROPS CLUSTER_ID | run PROPS]" >&2
    exit 2
    ;;
esac
