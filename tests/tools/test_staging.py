"""The stand-ins' Maven jars (tools/imagekit/staging.py's MavenJars, as recipes.py names
Hadoop's and Kafka's): the pom each resolves, and a real resolution from a Maven
repository already here (a copy of the image cache's: no download) staged into a build
context."""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tools.imagekit import recipes, staging

NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def dependencies(pom: str, under: str = "m:dependencies") -> list[tuple[str, ...]]:
    """(group, artifact, version, type) of each <dependency> under `under`."""
    found = ET.fromstring(pom).find(under, NS)
    assert found is not None, under
    tags = ("groupId", "artifactId", "version", "type")
    return [
        tuple(d.findtext(f"m:{t}", "", NS) for t in tags) for d in found.findall("m:dependency", NS)
    ]


def test_the_pom_names_each_artifact_with_its_version_or_the_managed_one() -> None:
    jars = staging.MavenJars(
        "thing", "1.0", Path("/cache"),
        artifacts=("org.example:core:1.0", "org.example:logging"),
        managed_by="org.example:bom:1.0",
    )  # fmt: skip
    pom = jars.pom()
    assert dependencies(pom) == [
        ("org.example", "core", "1.0", ""), ("org.example", "logging", "", ""),
    ]  # fmt: skip
    assert dependencies(pom, "m:dependencyManagement/m:dependencies") == [
        ("org.example", "bom", "1.0", "pom")
    ]
    assert ET.fromstring(pom).findtext("m:artifactId", "", NS) == "thing-standin-jars"
    unmanaged = staging.MavenJars("thing", "1.0", Path("/cache"), ("org.example:core:1.0",))
    assert ET.fromstring(unmanaged.pom()).find("m:dependencyManagement", NS) is None


def test_the_stand_ins_poms_pin_what_their_images_ship() -> None:
    hadoop = dependencies(recipes.hadoop_jars().pom())
    assert ("org.apache.hadoop", "hadoop-hdfs", recipes.HADOOP_VERSION, "") in hadoop
    assert ("org.slf4j", "slf4j-reload4j", "", "") in hadoop  # hadoop-project's version
    kafka = dependencies(recipes.kafka_jars().pom())
    assert ("org.apache.kafka", "kafka_2.13", recipes.KAFKA_VERSION, "") in kafka
    assert all(version for _, _, version, _ in kafka)  # nothing manages Kafka's


@pytest.mark.slow
@pytest.mark.parametrize(
    ("jars", "expect"),
    [
        (recipes.hadoop_jars, ["lib/hadoop-hdfs-{v}.jar", "webapps/hdfs/index.html"]),
        (recipes.kafka_jars, ["libs/kafka_2.13-{v}.jar", "libs/log4j-core-2.25.3.jar"]),
    ],
    ids=["hadoop", "kafka"],
)
def test_jars_resolved_from_a_kept_repository_are_staged(jars, expect, tmp_path: Path) -> None:
    """An unfinished resolution (no `done`) starts again, keeping the Maven repository; the
    context gets what the image cache's own resolution has."""
    if shutil.which("mvn") is None:
        pytest.fail("no `mvn` on PATH (tools/setup.sh installs it)")
    mine = jars()
    mine._resolved()  # the image cache's: instant once resolved
    cache = tmp_path / "cache"
    home = cache / f"{mine.name}-{mine.version}"
    shutil.copytree(mine.cache / home.name / "repository", home / "repository")
    (home / mine.lib_dir).mkdir()
    (home / mine.lib_dir / "half-written.jar").write_bytes(b"")
    fresh = staging.MavenJars(**{**mine.__dict__, "cache": cache})
    context = tmp_path / "context"
    fresh.fill(context)
    assert (home / "done").read_text() == mine.version
    staged = sorted(p.relative_to(context).as_posix() for p in context.rglob("*") if p.is_file())
    for path in expect:
        assert path.format(v=mine.version) in staged
    assert f"{mine.lib_dir}/half-written.jar" not in staged
    want = sorted(p.name for p in (mine.cache / home.name / mine.lib_dir).glob("*.jar"))
    assert sorted(p.name for p in (context / mine.lib_dir).glob("*.jar")) == want
