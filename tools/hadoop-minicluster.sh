#!/usr/bin/env bash
# A real HDFS for tests: Hadoop's MiniDFSCluster (namenode + datanodes in one JVM) from the
# hadoop-hdfs tests jar on Maven Central. Needs only java (17) and mvn.
#
#   tools/hadoop-minicluster.sh [fetch]      download once; print the classpath file
#   tools/hadoop-minicluster.sh cached       exit 0 if the jars are already here
#   tools/hadoop-minicluster.sh run ARGS...  exec MiniDFSClusterManager (-nnport, -datanodes,
#                                            -format, -writeDetails FILE, -D key=value)
#
# Jars go to ${ELASTICCTR_CACHE:-$HOME/.cache/elasticctr}/hadoop-<version>/ (a Maven local
# repository there plus classpath.txt), outside the repo; a second run does not call Maven.
set -euo pipefail

version=${HADOOP_VERSION:-3.4.2}
cache=${ELASTICCTR_CACHE:-$HOME/.cache/elasticctr}/hadoop-$version
# hadoop-hdfs declares hadoop-common "provided", so every piece is named here; the tests
# jars hold MiniDFSCluster (hdfs) and the test utilities it calls (common).
artifacts=(
  "org.apache.hadoop:hadoop-common:$version"
  "org.apache.hadoop:hadoop-common:$version:test-jar"
  "org.apache.hadoop:hadoop-hdfs:$version"
  "org.apache.hadoop:hadoop-hdfs:$version:test-jar"
  "org.apache.hadoop:hadoop-hdfs-client:$version"
)
# shellcheck source=lib/maven-classpath.sh
. "$(dirname "$0")/lib/maven-classpath.sh"

case "${1:-fetch}" in
  fetch | cached)
    maven_classpath "${1:-fetch}" "$cache" "${artifacts[@]}"
    ;;
  run)
    shift
    maven_classpath fetch "$cache" "${artifacts[@]}" >/dev/null
    exec java ${HADOOP_MINICLUSTER_JAVA_OPTS:-} -cp "$(maven_classpath_of "$cache")" \
      org.apache.hadoop.test.MiniDFSClusterManager "$@"
    ;;
  *)
    echo "usage: $0 [fetch | cached | run MiniDFSClusterManager-args...]" >&2
    exit 2
    ;;
esac
