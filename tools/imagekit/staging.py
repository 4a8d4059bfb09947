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
class MavenJars:
    """Jars from Maven Central (the artifacts and their runtime dependencies) into
    `lib_dir`, resolved once per name and version into the cache (as
    tools/lib/maven-classpath.sh does for the tests' minicluster and broker).

    `artifacts` are group:artifact[:version] (no version: the managing pom's);
    `managed_by` is a group:artifact:version pom whose dependencyManagement is imported;
    `unpack` pairs an artifact (group:artifact:version:type:classifier) with a folder
    inside it that goes to the context as it is."""

    name: str
    version: str
    cache: Path
    artifacts: tuple[str, ...]
    lib_dir: str = "lib"
    managed_by: str | None = None
    unpack: tuple[tuple[str, str], ...] = ()

    def pom(self) -> str:
        dependencies = "\n".join(f"    {_dependency(artifact)}" for artifact in self.artifacts)
        management = ""
        if self.managed_by:
            group, artifact, version = self.managed_by.split(":")
            management = f"""
  <dependencyManagement>
    <dependencies>
      <dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>
        <version>{version}</version><type>pom</type><scope>import</scope></dependency>
    </dependencies>
  </dependencyManagement>"""
        return f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>elasticctr.images</groupId>
  <artifactId>{self.name}-standin-jars</artifactId>
  <version>1</version>
  <packaging>pom</packaging>{management}
  <dependencies>
{dependencies}
  </dependencies>
</project>
"""

    def fingerprint(self, fp: Fingerprint) -> None:
        fp.text(f"{self.name}-pom", self.pom())
        for artifact, folder in self.unpack:
            fp.text(f"{self.name}-{folder}", artifact)

    def _mvn(self, home: Path, *goal: str) -> None:
        run(
            [
                "mvn", "-B", "-q", "-f", home / "pom.xml",
                f"-Dmaven.repo.local={home / 'repository'}", *goal, "-Dstyle.color=never",
            ],
            nice=True,
        )  # fmt: skip

    def _resolved(self) -> Path:
        """Directory with `lib_dir` (the jars) and the unpacked folders, downloaded on
        first use (a `done` file marks it whole)."""
        home = self.cache / f"{self.name}-{self.version}"
        if (home / "done").is_file():
            return home
        # What an earlier, unfinished resolution left goes, but for the Maven repository:
        # Maven only ever adds whole files to it, so what it holds need not be fetched again.
        home.mkdir(parents=True, exist_ok=True)
        for left in home.iterdir():
            if left.is_dir() and left.name != "repository":
                shutil.rmtree(left)
            elif not left.is_dir():
                left.unlink()
        (home / "pom.xml").write_text(self.pom())
        say(f"resolving {self.name.capitalize()} {self.version} jars from Maven Central")
        self._mvn(
            home, "dependency:copy-dependencies", f"-DoutputDirectory={home / self.lib_dir}",
            "-DincludeScope=runtime",
        )  # fmt: skip
        for artifact, folder in self.unpack:
            self._mvn(
                home, "dependency:copy", f"-Dartifact={artifact}", f"-DoutputDirectory={home}"
            )
            _, name, version, kind, classifier = artifact.split(":")
            with zipfile.ZipFile(home / f"{name}-{version}-{classifier}.{kind}") as archive:
                members = [m for m in archive.namelist() if m.startswith(f"{folder}/")]
                archive.extractall(home, members)
        (home / "done").write_text(self.version)
        return home

    def fill(self, context: Path) -> None:
        home = self._resolved()
        for jar in sorted((home / self.lib_dir).glob("*.jar")):
            link_or_copy(jar, context / self.lib_dir / jar.name)
        for _, folder in self.unpack:
            shutil.copytree(home / folder, context / folder)


def _dependency(coordinate: str) -> str:
    """A pom's <dependency> element for group:artifact[:version]."""
    group, artifact, *version = coordinate.split(":")
    pinned = f"<version>{version[0]}</version>" if version else ""
    return (
        f"<dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
        f"{pinned}</dependency>"
    )
