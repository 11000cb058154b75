"""A real Hive metastore server of a test: Hive's own Thrift metastore (`HiveMetaStore`, Hive 2.3, the
version whose jars pyspark ships and whose client the Iceberg runtime's HiveCatalog uses), in a JVM of
its own on a free port, its database an embedded Derby of a temporary directory. Started from pyspark's
jars: nothing to fetch. Stopped and removed at the end.

pyspark ships neither what Hive's default logging needs (the LMAX disruptor) nor its default connection
pool (BoneCP): the server gets a plain console log4j2 configuration and no pool (one Derby connection
per request is plenty for a test).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.exactly_once import free_port
from tests.support.servers import server_process, takes_connections

MAIN_CLASS = "org.apache.hadoop.hive.metastore.HiveMetaStore"
#: Its first start creates the metastore's schema in Derby (about 10 s on a quiet 2-core machine).
START_TIMEOUT = 120.0

_SITE = """<configuration>
<property><name>javax.jdo.option.ConnectionURL</name><value>jdbc:derby:;databaseName={db};create=true</value></property>
<property><name>datanucleus.schema.autoCreateAll</name><value>true</value></property>
<property><name>datanucleus.connectionPoolingType</name><value>None</value></property>
<property><name>hive.metastore.schema.verification</name><value>false</value></property>
<property><name>hive.metastore.warehouse.dir</name><value>{warehouse}</value></property>
</configuration>
"""
_LOG4J2 = """status = WARN
appender.console.type = Console
appender.console.name = console
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d %p %c: %m%n
rootLogger.level = WARN
rootLogger.appenderRef.console.ref = console
"""


@dataclass(frozen=True)
class HiveMetastore:
    uri: str  # thrift://127.0.0.1:PORT
    log: Path


def _pyspark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


@contextmanager
def hive_metastore() -> Iterator[HiveMetastore]:
    """Start the metastore, wait until its port takes connections, yield it, stop it."""
    base = Path(tempfile.mkdtemp(prefix="hive-metastore-"))
    conf = base / "conf"
    conf.mkdir()
    (conf / "hive-site.xml").write_text(_SITE.format(db=base / "metastore_db", warehouse=(base / "warehouse").as_uri()))
    (conf / "hive-log4j2.properties").write_text(_LOG4J2)
    port = free_port()
    argv = [shutil.which("java") or "java", "-Xmx512m", f"-Dderby.system.home={base}",
            "-Dlog4j2.contextSelector=org.apache.logging.log4j.core.selector.ClassLoaderContextSelector",
            "-cp", f"{conf}:{_pyspark_jars()}/*", MAIN_CLASS, "-p", str(port)]
    with server_process("the Hive metastore", argv, base=base, ready=takes_connections(port),
                        timeout=START_TIMEOUT) as log:
        yield HiveMetastore(f"thrift://127.0.0.1:{port}", log)
