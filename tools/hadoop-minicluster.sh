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
classpath_file=$cache/classpath.txt

fetch() {
  [ -s "$classpath_file" ] && return 0
  command -v mvn >/dev/null || { echo "hadoop-minicluster: mvn not found" >&2; exit 127; }
  mkdir -p "$cache"
  # Two test sessions may fetch at once: one downloads, the other waits and reuses it.
  exec 9>"$cache/.lock"
  flock 9
  [ -s "$classpath_file" ] || download
  exec 9>&-  # release the lock here, not when a JVM that inherited it exits
}

download() {
  # hadoop-hdfs declares hadoop-common "provided", so every piece is named here; the tests
  # jars hold MiniDFSCluster (hdfs) and the test utilities it calls (common).
  cat >"$cache/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>elasticctr.tests</groupId>
  <artifactId>hadoop-minicluster-classpath</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.hadoop</groupId><artifactId>hadoop-common</artifactId><version>$version</version></dependency>
    <dependency><groupId>org.apache.hadoop</groupId><artifactId>hadoop-common</artifactId><version>$version</version><type>test-jar</type></dependency>
    <dependency><groupId>org.apache.hadoop</groupId><artifactId>hadoop-hdfs</artifactId><version>$version</version></dependency>
    <dependency><groupId>org.apache.hadoop</groupId><artifactId>hadoop-hdfs</artifactId><version>$version</version><type>test-jar</type></dependency>
    <dependency><groupId>org.apache.hadoop</groupId><artifactId>hadoop-hdfs-client</artifactId><version>$version</version></dependency>
  </dependencies>
</project>
EOF
  local tmp="$classpath_file.tmp"
  mvn -B -q -f "$cache/pom.xml" -Dmaven.repo.local="$cache/repository" \
    dependency:build-classpath -Dmdep.outputFile="$tmp" -Dmdep.includeScope=runtime \
    -Dstyle.color=never >&2  # stdout is the classpath file name only
  mv "$tmp" "$classpath_file"  # written last: its presence means the cache is complete
}

case "${1:-fetch}" in
  fetch)
    fetch
    echo "$classpath_file"
    ;;
  cached)
    test -s "$classpath_file"
    ;;
  run)
    shift
    fetch
    exec java ${HADOOP_MINICLUSTER_JAVA_OPTS:-} -cp "$(cat "$classpath_file")" \
      org.apache.hadoop.test.MiniDFSClusterManager "$@"
    ;;
  *)
    echo "usage: $0 [fetch | cached | run MiniDFSClusterManager-args...]" >&2
    exit 2
    ;;
esac
