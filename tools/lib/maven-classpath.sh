# A classpath of Maven Central artifacts and their runtime dependencies, resolved once into
# a cache directory; sourced by tools/hadoop-minicluster.sh and tools/kafka-broker.sh.
#
#   maven_classpath fetch CACHE ARTIFACT...   resolve once; print the classpath file
#   maven_classpath cached CACHE              exit 0 if CACHE holds a resolved classpath
#   maven_classpath_of CACHE                  the classpath (after fetch)
#
# ARTIFACT is group:artifact:version[:type] (type test-jar: a tests jar). CACHE holds a
# Maven local repository, the generated pom.xml and classpath.txt; once classpath.txt is
# there, Maven is not called again. Messages name the sourcing script.

maven_classpath() {
  local command=$1 cache=$2
  shift 2
  case $command in
    fetch)
      _maven_classpath_fetch "$cache" "$@"
      echo "$cache/classpath.txt"
      ;;
    cached)
      test -s "$cache/classpath.txt"
      ;;
    *)
      echo "maven_classpath: unknown command $command (fetch, cached)" >&2
      return 2
      ;;
  esac
}

maven_classpath_of() {
  cat "$1/classpath.txt"
}

_maven_classpath_fetch() {
  local cache=$1
  shift
  [ -s "$cache/classpath.txt" ] && return 0
  command -v mvn >/dev/null || { echo "$(basename "$0" .sh): mvn not found" >&2; exit 127; }
  mkdir -p "$cache"
  # Two test sessions may fetch at once: one downloads, the other waits and reuses it.
  exec 9>"$cache/.lock"
  flock 9
  [ -s "$cache/classpath.txt" ] || _maven_classpath_resolve "$cache" "$@"
  exec 9>&-  # release the lock here, not when a JVM that inherited it exits
}

_maven_classpath_resolve() {
  local cache=$1 coordinate group artifact version type dependencies=""
  shift
  for coordinate in "$@"; do
    IFS=: read -r group artifact version type <<<"$coordinate"
    dependencies+="    <dependency><groupId>$group</groupId><artifactId>$artifact</artifactId>"
    dependencies+="<version>$version</version>${type:+<type>$type</type>}</dependency>"$'\n'
  done
  cat >"$cache/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>elasticctr.tests</groupId>
  <artifactId>$(basename "$0" .sh)-classpath</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
$dependencies  </dependencies>
</project>
POM
  local tmp="$cache/classpath.txt.tmp"
  mvn -B -q -f "$cache/pom.xml" -Dmaven.repo.local="$cache/repository" \
    dependency:build-classpath -Dmdep.outputFile="$tmp" -Dmdep.includeScope=runtime \
    -Dstyle.color=never >&2  # stdout is the classpath file name only
  mv "$tmp" "$cache/classpath.txt"  # written last: its presence means the cache is complete
}
