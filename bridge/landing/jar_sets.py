"""The Java libraries (jars) a table format needs in Spark, pinned to the Spark that pyproject.toml
pins, and how `mqbridge jars` fetches them: each jar and its published SHA-1 from a Maven repository
(Maven Central by default, or a mirror) over HTTPS, checked before it is kept, into
`<jars_dir>/<set>` (`[spark] jars_dir`), where the bridge hands them to its Spark driver.

Only the jars themselves, not their dependencies: Spark already ships Scala, Hadoop's client,
Parquet and Jackson, and a second copy of those on its class path breaks it. The test-only sets (the
S3A client and Hadoop's mini cluster, with their dependencies) are fetched by `scripts/jars.sh` with
Maven instead.
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


#: The jar sets by name. Delta Lake 4.4.0 is built for Spark 4.2.0 (`delta-spark_4.2_2.13`).
JAR_SETS: dict[str, tuple[Jar, ...]] = {
    "delta": (Jar("io.delta", "delta-spark_4.2_2.13", "4.4.0"), Jar("io.delta", "delta-storage", "4.4.0")),
}


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
