"""The Java libraries (jars) a table format needs in Spark, pinned to the Spark that pyproject.toml
pins, and how `mqbridge jars` fetches them: each jar and its published SHA-1 from a Maven repository
(Maven Central by default, or a mirror) over HTTPS, checked before it is kept, into
`<jars_dir>/<set>` (`[spark] jars_dir`), where the bridge hands them to its Spark driver.

Only the jars themselves, not their dependencies: Spark already ships Scala, Hadoop's client,
Parquet and Jackson, and a second copy of those on its class path breaks it. The test-only set
(Hadoop's mini cluster) is fetched by `scripts/jars.sh` with Maven instead.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

#: The Maven repository jars come from unless `--repository` names a mirror.
MAVEN_CENTRAL = "https://repo.maven.apache.org/maven2"


@dataclass(frozen=True)
class Jar:
    """One Maven artifact: group, artifact and version."""

    group: str
    artifact: str
    version: str

    @property
    def file_name(self) -> str:
        return f"{self.artifact}-{self.version}.jar"

    def url(self, repository: str) -> str:
        path = f"{self.group.replace('.', '/')}/{self.artifact}/{self.version}/{self.file_name}"
        return f"{repository.rstrip('/')}/{path}"


#: The modules of the AWS SDK v2 that S3A loads (not the SDK's 686 MB `bundle`; scripts/jars.sh says why).
_AWS_SDK_MODULES = (
    "annotations", "apache-client", "arns", "auth", "aws-core", "aws-query-protocol", "aws-xml-protocol", "checksums",
    "checksums-spi", "crt-core", "endpoints-spi", "http-auth", "http-auth-aws", "http-auth-aws-eventstream",
    "http-auth-spi", "http-client-spi", "identity-spi", "json-utils", "metrics-spi", "netty-nio-client", "profiles",
    "protocol-core", "regions", "retries", "retries-spi", "s3", "s3-transfer-manager", "sdk-core",
    "third-party-jackson-core", "utils")

#: The jar sets by name. Delta Lake 4.4.0 for Spark 4.1 (`delta-spark_4.1_2.13`). `s3`: Hadoop's
#: S3A connector for an `s3a://` warehouse, at the Hadoop version Spark 4.1 ships (3.4.2), with the AWS SDK
#: modules and versions its pom names (`mqbridge.landing.object_stores`); HDFS's client is in Spark already.
#: `iceberg`: Apache Iceberg 1.12.0's Spark runtime for Spark 4.1 (one shaded jar; Iceberg publishes none for
#: Spark 4.2 yet, and 4.1's does not load on 4.2), with the JDBC drivers of its JDBC catalog: SQLite (the
#: embedded catalog in `state_dir`) and PostgreSQL.
JAR_SETS: dict[str, tuple[Jar, ...]] = {
    "delta": (Jar("io.delta", "delta-spark_4.1_2.13", "4.4.0"), Jar("io.delta", "delta-storage", "4.4.0")),
    "iceberg": (Jar("org.apache.iceberg", "iceberg-spark-runtime-4.1_2.13", "1.12.0"),
                Jar("org.xerial", "sqlite-jdbc", "3.54.1.0"), Jar("org.postgresql", "postgresql", "42.7.14")),
    "s3": (Jar("org.apache.hadoop", "hadoop-aws", "3.4.2"),
           Jar("software.amazon.s3.analyticsaccelerator", "analyticsaccelerator-s3", "1.2.1"),
           Jar("software.amazon.eventstream", "eventstream", "1.0.1"),
           Jar("org.reactivestreams", "reactive-streams", "1.0.4"),
           *(Jar("software.amazon.awssdk", module, "2.29.52") for module in _AWS_SDK_MODULES)),
}


def present(jars_dir: Path, name: str, required: tuple[str, ...], needed_by: str, command: str) -> list[Path]:
    """The jars of the set `name` under `<jars_dir>/<name>`; ConfigError naming the `command` that fetches
    them when the folder or a jar whose file name starts with one of `required` is missing (a start-up
    error, before any listener connects). `needed_by`: what needs them, e.g. 'table_format = "delta"
    needs the Delta Lake jars'."""
    from mqbridge.errors import ConfigError

    folder = Path(jars_dir) / name
    jars = sorted(folder.glob("*.jar")) if folder.is_dir() else []
    missing = [prefix for prefix in required if not any(j.name.startswith(prefix) for j in jars)]
    if missing:
        raise ConfigError(f"{needed_by} in {folder}, which lacks {', '.join(p.rstrip('_-') for p in missing)}: run "
                          f"`{command}` (or copy that folder from a host that ran it, or fetch from a mirror with "
                          "--repository; `[spark] jars_dir` says where it is)")
    return jars


class FetchError(Exception):
    """A jar could not be fetched or did not match its checksum."""


def fetch(name: str, jars_dir: Path, repository: str = MAVEN_CENTRAL, timeout: float = 60.0) -> list[Path]:
    """Fetch the jar set `name` into `<jars_dir>/<name>` (files already there with the right checksum
    are kept); the jars' paths. Raises FetchError naming the jar and the repository."""
    target = Path(jars_dir) / name
    target.mkdir(parents=True, exist_ok=True)
    paths = []
    for jar in JAR_SETS[name]:
        url = jar.url(repository)
        try:
            expected = _read(url + ".sha1", timeout).decode().split()[0].strip().lower()
        except (OSError, urllib.error.URLError, IndexError) as exc:
            raise FetchError(f"cannot fetch the checksum of {jar.file_name} from {repository}: {exc}") from exc
        path = target / jar.file_name
        if path.is_file() and _sha1(path.read_bytes()) == expected:
            paths.append(path)
            continue
        try:
            data = _read(url, timeout)
        except (OSError, urllib.error.URLError) as exc:
            raise FetchError(f"cannot fetch {jar.file_name} from {repository}: {exc}") from exc
        if _sha1(data) != expected:
            raise FetchError(f"{jar.file_name} from {repository} does not match its published SHA-1 ({expected}): "
                             "not kept")
        with tempfile.NamedTemporaryFile(dir=target, prefix=f".{jar.file_name}.", delete=False) as tmp:
            tmp.write(data)
        os.replace(tmp.name, path)
        os.chmod(path, 0o644)
        paths.append(path)
    return paths


def _read(url: str, timeout: float) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (https or a mirror the operator names)
        data: bytes = response.read()
        return data


def _sha1(data: bytes) -> str:
    return hashlib.sha1(data, usedforsecurity=False).hexdigest()
