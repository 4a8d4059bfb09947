"""What a stand-in's build context needs beyond its folder under tools/standins/: each
Stager adds its part to the key (cheaply: stamps, file hashes, versions) and, only when
the image is rebuilt, puts the files into the staged context."""

from __future__ import annotations

import os
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from .fingerprint import Fingerprint
from .run import run, say

DEBIAN_MIRROR = "http://deb.debian.org/debian"
DEBIAN_SECURITY = "http://deb.debian.org/debian-security"


class Stager(Protocol):
    def fingerprint(self, fp: Fingerprint) -> None: ...

    def fill(self, context: Path) -> None: ...


def link_or_copy(source: Path, target: Path) -> None:
    """Hard link when possible (same file system: free), else copy."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


@dataclass(frozen=True)
class DebianRootfs:
    """rootfs.tar by mmdebstrap: a minimal Debian with apt sources for later builds."""

    suite: str = "bookworm"
    # In the base rather than installed by later builds: its postinst rewrites
    # /etc/ssl/certs/ca-certificates.crt, where builds mount the host's bundle read-only.
    include: tuple[str, ...] = ("ca-certificates",)
    dpkg_excludes: tuple[str, ...] = (
        # as Docker's slim images: no docs, man pages or translations
        "/usr/share/doc/*",
        "/usr/share/man/*",
        "/usr/share/info/*",
        "/usr/share/locale/*",
        "/usr/share/lintian/*",
    )

    def command(self, target: Path) -> list[str]:
        sources = [
            f"deb {DEBIAN_MIRROR} {self.suite} main",
            f"deb {DEBIAN_MIRROR} {self.suite}-updates main",
            f"deb {DEBIAN_SECURITY} {self.suite}-security main",
        ]
        options = [f"--dpkgopt=path-exclude={pattern}" for pattern in self.dpkg_excludes]
        # copyright files stay: they are the licences of what is inside
        options.append("--dpkgopt=path-include=/usr/share/doc/*/copyright")
        return [
            "mmdebstrap", "--variant=minbase", "--mode=root", "--format=tar",
            f"--include={','.join(self.include)}", *options, self.suite, str(target), *sources,
        ]  # fmt: skip

    def fingerprint(self, fp: Fingerprint) -> None:
        fp.text("mmdebstrap", " ".join(self.command(Path("rootfs.tar"))))

    def fill(self, context: Path) -> None:
        run(self.command(context / "rootfs.tar"), nice=True)


@dataclass(frozen=True)
class RustToolchain:
    """The host's rustup toolchain: rustc, cargo, rustdoc and lib/ (the minimal profile's
    files; no docs, clippy or rustfmt) as toolchain/, and the rustup binary."""

    toolchain: Path
    rustup: Path
    binaries: tuple[str, ...] = ("cargo", "rustc", "rustdoc")

    def _files(self) -> list[tuple[str, Path]]:
        root = self.toolchain.resolve()
        files = [(f"bin/{name}", root / "bin" / name) for name in self.binaries]
        for directory, _, names in os.walk(root / "lib"):
            for name in names:
                path = Path(directory, name)
                files.append((path.relative_to(root).as_posix(), path))
        return sorted(files)

    def fingerprint(self, fp: Fingerprint) -> None:
        if not self.toolchain.exists():
            raise FileNotFoundError(f"no Rust toolchain at {self.toolchain} (rustup install)")
        for relative, path in self._files():
            if path.is_file() and not path.is_symlink():
                fp.file(f"toolchain/{relative}", path)
        fp.file("rustup", self.rustup.resolve())

    def fill(self, context: Path) -> None:
        for relative, path in self._files():
            target = context / "toolchain" / relative
            if path.is_symlink():
                target.parent.mkdir(parents=True, exist_ok=True)
                target.symlink_to(os.readlink(path))
            elif path.is_file():
                link_or_copy(path, target)
        shutil.copy2(self.rustup.resolve(), context / "rustup")


@dataclass(frozen=True)
class Binaries:
    """Prebuilt binaries (tools/build-tools.sh) into bin/."""

    paths: tuple[Path, ...]

    def fingerprint(self, fp: Fingerprint) -> None:
        for path in self.paths:
            fp.file(f"bin/{path.name}", path)

    def fill(self, context: Path) -> None:
        for path in self.paths:
            link_or_copy(path, context / "bin" / path.name)


@dataclass(frozen=True)
class File:
    """One file from outside the repository (e.g. from a Go module), under `name`."""

    source: Path
    name: str

    def fingerprint(self, fp: Fingerprint) -> None:
        fp.file(self.name, self.source)

    def fill(self, context: Path) -> None:
        shutil.copy2(self.source, context / self.name)
        (context / self.name).chmod(0o755)


@dataclass(frozen=True)
class HadoopJars:
    """Hadoop's jars (hdfs, hdfs-client, common and their runtime dependencies) from Maven
    Central into lib/, resolved once per version into the cache (as the project's
    tools/hadoop-minicluster.sh does for the test minicluster), and the web UIs' files
    into webapps/: the namenode and datanode refuse to start without them, and Maven has
    them only in hadoop-hdfs's tests jar (the distribution ships them in
    share/hadoop/hdfs/webapps)."""

    version: str
    cache: Path
    artifacts: tuple[str, ...] = ("hadoop-common", "hadoop-hdfs", "hadoop-hdfs-client")

    def pom(self) -> str:
        dependencies = "\n".join(
            "    <dependency><groupId>org.apache.hadoop</groupId>"
            f"<artifactId>{artifact}</artifactId><version>{self.version}</version></dependency>"
            for artifact in self.artifacts
        )
        # Hadoop's logging binding: hadoop-project's management leaves it out of the
        # runtime closure, and without it slf4j drops every log line.
        dependencies += (
            "\n    <dependency><groupId>org.slf4j</groupId>"
            "<artifactId>slf4j-reload4j</artifactId></dependency>"
        )
        return f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>elasticctr.images</groupId>
  <artifactId>hadoop-standin-jars</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <!-- Hadoop's own dependency versions (hadoop-project's dependencyManagement), as its
       distribution ships them: Maven's nearest-wins alone picks an older jackson-core
       that the namenode cannot start with. -->
  <dependencyManagement>
    <dependencies>
      <dependency><groupId>org.apache.hadoop</groupId><artifactId>hadoop-project</artifactId>
        <version>{self.version}</version><type>pom</type><scope>import</scope></dependency>
    </dependencies>
  </dependencyManagement>
  <dependencies>
{dependencies}
  </dependencies>
</project>
"""

    def fingerprint(self, fp: Fingerprint) -> None:
        fp.text("hadoop-pom", self.pom())
        fp.text("hadoop-webapps", f"org.apache.hadoop:hadoop-hdfs:{self.version}:jar:tests")

    def _resolved(self) -> Path:
        """Directory with lib/ (the jars) and webapps/, downloaded on first use (a `done`
        file marks it whole)."""
        home = self.cache / f"hadoop-{self.version}"
        jars = home / "lib"
        if (home / "done").is_file():
            return home
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(parents=True)
        (home / "pom.xml").write_text(self.pom())
        say(f"resolving Hadoop {self.version} jars from Maven Central")
        run(
            [
                "mvn", "-B", "-q", "-f", home / "pom.xml",
                f"-Dmaven.repo.local={home / 'repository'}",
                "dependency:copy-dependencies", f"-DoutputDirectory={jars}",
                "-DincludeScope=runtime", "-Dstyle.color=never",
            ],
            nice=True,
        )  # fmt: skip
        tests_jar = f"org.apache.hadoop:hadoop-hdfs:{self.version}:jar:tests"
        run(
            [
                "mvn", "-B", "-q", "-f", home / "pom.xml",
                f"-Dmaven.repo.local={home / 'repository'}",
                "dependency:copy", f"-Dartifact={tests_jar}", f"-DoutputDirectory={home}",
                "-Dstyle.color=never",
            ],
            nice=True,
        )  # fmt: skip
        with zipfile.ZipFile(home / f"hadoop-hdfs-{self.version}-tests.jar") as archive:
            archive.extractall(home, [m for m in archive.namelist() if m.startswith("webapps/")])
        (home / "done").write_text(self.version)
        return home

    def fill(self, context: Path) -> None:
        home = self._resolved()
        for jar in sorted((home / "lib").glob("*.jar")):
            link_or_copy(jar, context / "lib" / jar.name)
        shutil.copytree(home / "webapps", context / "webapps")


@dataclass(frozen=True)
class KafkaJars:
    """Kafka's broker jars (kafka_2.13 and its runtime dependencies, with the log4j 2
    binding the distribution ships) from Maven Central into libs/, resolved once per
    version into the cache, as tools/kafka-broker.sh resolves the tests' broker."""

    version: str
    cache: Path
    log4j: str = "2.25.3"
    slf4j: str = "2.0.17"

    def pom(self) -> str:
        def dep(group: str, artifact: str, version: str) -> str:
            return (
                f"    <dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
                f"<version>{version}</version></dependency>"
            )

        dependencies = "\n".join([
            dep("org.apache.kafka", "kafka_2.13", self.version),
            dep("org.slf4j", "slf4j-api", self.slf4j),
            dep("org.apache.logging.log4j", "log4j-slf4j2-impl", self.log4j),
            dep("org.apache.logging.log4j", "log4j-core", self.log4j),
        ])  # fmt: skip
        return f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>elasticctr.images</groupId>
  <artifactId>kafka-standin-jars</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
{dependencies}
  </dependencies>
</project>
"""

    def fingerprint(self, fp: Fingerprint) -> None:
        fp.text("kafka-pom", self.pom())

    def _resolved(self) -> Path:
        home = self.cache / f"kafka-{self.version}"
        if (home / "done").is_file():
            return home
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(parents=True)
        (home / "pom.xml").write_text(self.pom())
        say(f"resolving Kafka {self.version} jars from Maven Central")
        run(
            [
                "mvn", "-B", "-q", "-f", home / "pom.xml",
                f"-Dmaven.repo.local={home / 'repository'}",
                "dependency:copy-dependencies", f"-DoutputDirectory={home / 'libs'}",
                "-DincludeScope=runtime", "-Dstyle.color=never",
            ],
            nice=True,
        )  # fmt: skip
        (home / "done").write_text(self.version)
        return home

    def fill(self, context: Path) -> None:
        home = self._resolved()
        for jar in sorted((home / "libs").glob("*.jar")):
            link_or_copy(jar, context / "libs" / jar.name)
