"""mqbridge's Delta log stores, compiled into one jar beside the Delta jars:

* `org.mqbridge.delta.ConditionalPutLogStore` (`java/ConditionalPutLogStore.java`, whose comment says why
  and how), the store of tables on `s3a://`: it makes each commit's log file by a conditional PUT, so that
  of two writers of one version the store refuses the later one and Delta takes it for the concurrent
  commit it is. Delta's default for S3 replaces the earlier file instead: a commit that was acknowledged
  is lost (docs/guarantees.md, "Delta tables on S3 with several writers"). Required there: without the
  jar a Delta warehouse on `s3a://` is a start-up error naming the command.
* `org.mqbridge.delta.LocalLinkLogStore` (`java/LocalLinkLogStore.java`), the store of tables on a local
  file system: the same refusal of a second writer as Delta's default store for `file:`, by a hard link
  instead of Hadoop's rename, which without Hadoop's native library forks a `chmod` or `readlink` process
  per file it touches (20 per commit, on the commit's critical path). Only faster: without the jar such
  tables commit through Delta's default store.

No Maven artifact provides such stores for Delta's Spark writer, so `mqbridge jars delta` compiles the
classes shipped with this package against the Delta and Hadoop jars they run with (`build`: a JDK's
`javac`) into `<jars_dir>/delta/mqbridge-delta-logstore-<VERSION>.jar`, beside the Delta jars that go to
the driver (`session_conf` names the store of the warehouse's scheme).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path

from mqbridge.errors import ConfigError

#: The class Delta is told to use for `s3a://` (Delta instantiates it with the Hadoop configuration).
CLASS_NAME = "org.mqbridge.delta.ConditionalPutLogStore"
CONF_KEY = "spark.delta.logStore.s3a.impl"
#: The class Delta is told to use for `file:` (a local warehouse) when the jar is there.
LOCAL_CLASS_NAME = "org.mqbridge.delta.LocalLinkLogStore"
LOCAL_CONF_KEY = "spark.delta.logStore.file.impl"
#: S3A's option (Hadoop 3.4.2) of a create the store must refuse when the object exists (If-None-Match: *),
#: which the log store sets on each new log file.
CONDITIONAL_CREATE = "fs.option.create.conditional.overwrite"
#: The version of the shipped source: a changed source gets a new jar name, so an old jar is never taken
#: for the new one.
VERSION = "2"
JAR_PREFIX = "mqbridge-delta-logstore-"
JAR_NAME = f"{JAR_PREFIX}{VERSION}.jar"
SOURCES = tuple(Path(__file__).parent / "java" / name
                for name in ("ConditionalPutLogStore.java", "LocalLinkLogStore.java"))
#: The Java release the class is compiled for: the oldest Java Spark 4.1 runs on.
JAVA_RELEASE = "17"


class LogStoreBuildError(Exception):
    """The log store could not be compiled here (no javac, or javac refused it)."""


def build(delta_dir: Path) -> Path:
    """Compile the log stores against the Delta jars in `delta_dir` (`<jars_dir>/delta`) and Spark's Hadoop
    client, into `delta_dir`/JAR_NAME (kept when it is there already; an older version's jar is removed);
    the jar's path. LogStoreBuildError naming what is missing."""
    target = Path(delta_dir) / JAR_NAME
    if target.is_file():
        return target
    javac = _javac()
    storage = sorted(Path(delta_dir).glob("delta-storage-*.jar"))
    if not storage:
        raise LogStoreBuildError(f"no delta-storage jar in {delta_dir} to compile the log store against")
    classpath = os.pathsep.join([str(storage[-1]), *map(str, _hadoop_jars())])
    with tempfile.TemporaryDirectory(prefix="mqbridge-logstore-") as work:
        done = subprocess.run([javac, "--release", JAVA_RELEASE, "-nowarn", "-d", work, "-cp", classpath,
                               *map(str, SOURCES)],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            names = ", ".join(source.name for source in SOURCES)
            raise LogStoreBuildError(f"javac could not compile {names}: {(done.stderr or done.stdout).strip()}")
        with (tempfile.NamedTemporaryFile(dir=delta_dir, prefix=f".{JAR_NAME}.", delete=False) as tmp,
              zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as jar):
            # fixed entry times: the same source and javac make the same jar, byte for byte
            jar.writestr(_entry("META-INF/MANIFEST.MF"), "Manifest-Version: 1.0\r\nCreated-By: mqbridge\r\n\r\n")
            for path in sorted(Path(work).rglob("*.class")):
                jar.writestr(_entry(str(path.relative_to(work))), path.read_bytes())
    os.replace(tmp.name, target)
    os.chmod(target, 0o644)
    for older in Path(delta_dir).glob(f"{JAR_PREFIX}*.jar"):
        if older != target:  # an older version's classes must not shadow this one's on the class path
            older.unlink()
    return target


def _entry(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def _javac() -> str:
    java_home = os.environ.get("JAVA_HOME")
    candidates = [Path(java_home) / "bin" / "javac"] if java_home else []
    found = shutil.which("javac")
    candidates += [Path(found)] if found else []
    for candidate in candidates:
        if candidate.is_file():
            return str(candidate)
    raise LogStoreBuildError("no javac (a JDK's compiler): install a JDK 17 or later (Debian: apt-get install "
                             "default-jdk-headless), or copy the jar from a host that built it")


def _hadoop_jars() -> list[Path]:
    """The Hadoop client API jar of the pyspark this runs with (the log store is compiled against it)."""
    import pyspark

    jars = sorted((Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar"))
    if not jars:
        raise LogStoreBuildError("pyspark ships no hadoop-client-api jar to compile the log store against")
    return jars


def session_conf(delta_dir: Path, conf: Mapping[str, str], fetch_command: str) -> dict[str, str]:
    """`conf` with the log store named for `s3a://` (unless `conf` names one: the operator's choice
    wins); ConfigError naming `fetch_command` when its jar is not in `delta_dir` (its jar reaches the
    driver with the Delta jars of that folder)."""
    if CONF_KEY in conf:
        return dict(conf)
    if not (Path(delta_dir) / JAR_NAME).is_file():
        raise ConfigError(f"Delta tables on s3a:// need mqbridge's conditional-put log store ({JAR_NAME} in "
                          f"{delta_dir}), which `{fetch_command}` builds with a JDK's javac (without it two writers "
                          "of one version replace each other's commit on S3): install a JDK and run it")
    return {**conf, CONF_KEY: CLASS_NAME}


def local_session_conf(delta_dir: Path, conf: Mapping[str, str]) -> dict[str, str]:
    """`conf` with the log store named for `file:` when its jar is in `delta_dir` (unless `conf` names one);
    as it is without the jar: Delta's default store is as safe there, only slower."""
    if LOCAL_CONF_KEY in conf or not (Path(delta_dir) / JAR_NAME).is_file():
        return dict(conf)
    return {**conf, LOCAL_CONF_KEY: LOCAL_CLASS_NAME}
