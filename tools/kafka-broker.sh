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
classpath_file=$cache/classpath.txt
here=$(cd "$(dirname "$0")" && pwd)

fetch() {
  [ -s "$classpath_file" ] && return 0
  command -v mvn >/dev/null || { echo "kafka-broker: mvn not found" >&2; exit 127; }
  mkdir -p "$cache"
  # Two test sessions may fetch at once: one downloads, the other waits and reuses it.
  exec 9>"$cache/.lock"
  flock 9
  [ -s "$classpath_file" ] || download
  exec 9>&-  # release the lock here, not when a JVM that inherited it exits
}

download() {
  # kafka_2.13 is the broker (kafka.Kafka) and its storage formatter; log4j 2 behind
  # slf4j 2 is the logging the distribution ships (Maven's nearest-wins would pick an
  # slf4j 1.7 api, which ignores the slf4j 2 binding).
  cat >"$cache/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>elasticctr.tests</groupId>
  <artifactId>kafka-broker-classpath</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$version</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId><version>2.0.17</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j2-impl</artifactId><version>2.25.3</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>2.25.3</version></dependency>
  </dependencies>
</project>
EOF
  local tmp="$classpath_file.tmp"
  mvn -B -q -f "$cache/pom.xml" -Dmaven.repo.local="$cache/repository" \
    dependency:build-classpath -Dmdep.outputFile="$tmp" -Dmdep.includeScope=runtime \
    -Dstyle.color=never >&2  # stdout is the classpath file name only
  mv "$tmp" "$classpath_file"  # written last: its presence means the cache is complete
}

java_run() {
  # log4j2.properties of the stand-in: everything to stderr at INFO, Kafka's chatty parts at WARN.
  exec java ${KAFKA_JAVA_OPTS:--Xmx256m -Xms64m} \
    -Dlog4j2.configurationFile="$here/standins/kafka/log4j2.properties" \
    -cp "$(cat "$classpath_file")" "$@"
}

case "${1:-fetch}" in
  fetch)
    fetch
    echo "$classpath_file"
    ;;
  cached)
    test -s "$classpath_file"
    ;;
  format)
    [ $# -eq 3 ] || { echo "usage: $0 format PROPS CLUSTER_ID" >&2; exit 2; }
    fetch
    java_run kafka.tools.StorageTool format --config "$2" --cluster-id "$3" --ignore-formatted
    ;;
  run)
    [ $# -eq 2 ] || { echo "usage: $0 run PROPS" >&2; exit 2; }
    fetch
    java_run kafka.Kafka "$2"
    ;;
  *)
    echo "usage: $0 [fetch | cached | format PROPS CLUSTER_ID | run PROPS]" >&2
    exit 2
    ;;
esac
