"""Spark servers of a test, started from pyspark's own scripts, as an operator would start them: a
Spark Connect server (Spark's `spark-daemon.sh submit` of its server class) and a standalone cluster (`bin/spark-class`
running a Master and a Worker). Each binds 127.0.0.1 on free ports, keeps its logs, pid files and
scratch space under the directory it is given, and is stopped (or killed) by the test."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

import psutil
import pyspark

from mqbridge.landing.jvm import CODE_CACHE_OPTIONS, JIT_OPTIONS
from tests.support.exactly_once import free_port
from tests.support.servers import port_open

SPARK_HOME = Path(pyspark.__file__).resolve().parent
#: A JVM that has not opened its port by then is reported with its log.
START_TIMEOUT = 180.0


def _wait_for_port(port: int, *, open_: bool, timeout: float, what: str, log: Path | None) -> None:
    deadline = time.monotonic() + timeout
    while port_open(port) != open_:
        if time.monotonic() > deadline:
            tail = ""
            if log is not None and log.exists():
                tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
            raise RuntimeError(f"{what}: port {port} not {'open' if open_ else 'closed'} after {timeout:.0f}s\n{tail}")
        time.sleep(0.2)


def _spark_env(base: Path) -> dict[str, str]:
    return {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOG_DIR": str(base / "logs"),
            "SPARK_PID_DIR": str(base / "pid"), "SPARK_IDENT_STRING": f"mqbridge-tests-{base.name}",
            "SPARK_LOCAL_IP": "127.0.0.1"}


#: The Spark Connect server's main class, run in the background by Spark's `spark-daemon.sh` (what
#: `sbin/start-connect-server.sh` does; pyspark's wheel ships `spark-daemon.sh` but not that script).
CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
_CONNECT_DAEMON = ("bash", str(SPARK_HOME / "sbin" / "spark-daemon.sh"))


class SparkConnectServer:
    """A Spark Connect server on 127.0.0.1 with a local[2] Spark behind it."""

    def __init__(self, base: Path, port: int | None = None, *, private_dir: Path | None = None,
                 conf: Mapping[str, str] | None = None) -> None:
        self.base = base
        self.port = port or free_port()
        self.env = _spark_env(base)
        #: More settings it starts with (e.g. the Delta Lake jars and extension: `mqbridge.landing.delta`).
        self.conf = dict(conf or {})
        #: A directory the server sees as an empty file system of its own (a tmpfs mounted over it in
        #: a private mount namespace, as a server on another host sees its own disk at that path).
        self.private_dir = private_dir

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def _log(self) -> Path | None:
        logs = sorted((self.base / "logs").glob("*.out"))
        return logs[-1] if logs else None

    def pid(self) -> int:
        return int(next((self.base / "pid").glob("*.pid")).read_text().split()[0])

    def start(self) -> None:
        for sub in ("logs", "pid", "warehouse", "local"):
            (self.base / sub).mkdir(parents=True, exist_ok=True)
        wrapper: list[str] = []
        if self.private_dir is not None:  # the JVM (started in the background) keeps the namespace
            wrapper = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                       f"mount -t tmpfs mqbridge-test {self.private_dir} && exec \"$@\"", "sh"]
        subprocess.run(
            [*wrapper, *_CONNECT_DAEMON, "submit", CONNECT_SERVER_CLASS, "1", "--name", "Spark Connect server",
             "--master", "local[2]",
             "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
             "--conf", f"spark.connect.grpc.binding.port={self.port}",
             "--conf", "spark.ui.enabled=false",
             # As docs/spark-and-tables.md advises for a server that takes a bridge's small writes
             # (mqbridge.landing.jvm.JIT_OPTIONS, the in-process driver's default).
             "--conf", f"spark.driver.extraJavaOptions={JIT_OPTIONS} {CODE_CACHE_OPTIONS}",
             "--conf", f"spark.sql.warehouse.dir={self.base / 'warehouse'}",
             "--conf", f"spark.local.dir={self.base / 'local'}",
             *(arg for key, value in self.conf.items() for arg in ("--conf", f"{key}={value}"))],
            env=self.env, check=True, stdout=subprocess.DEVNULL, timeout=60)
        _wait_for_port(self.port, open_=True, timeout=START_TIMEOUT, what="Spark Connect server", log=self._log())

    def stop(self) -> None:
        subprocess.run([*_CONNECT_DAEMON, "stop", CONNECT_SERVER_CLASS, "1"], env=self.env, check=False,
                       stdout=subprocess.DEVNULL, timeout=120)
        _wait_for_port(self.port, open_=False, timeout=60, what="Spark Connect server", log=self._log())

    def kill(self) -> None:
        """SIGKILL of the server's JVM (a crash, not a stop)."""
        os.kill(self.pid(), signal.SIGKILL)
        _wait_for_port(self.port, open_=False, timeout=30, what="Spark Connect server", log=self._log())


class SparkStandalone:
    """A standalone cluster on 127.0.0.1: one Master and one Worker (`cores`, 1 GB), each a
    `bin/spark-class` process of this test (or of `bench/throughput.py --cluster`)."""

    def __init__(self, base: Path, cores: int = 1) -> None:
        self.base = base
        self.cores = cores
        self.port = free_port()
        self.env = _spark_env(base)
        self._procs: list[subprocess.Popen[bytes]] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _spawn(self, name: str, *args: str) -> Path:
        log = self.base / "logs" / f"{name}.log"
        with open(log, "wb") as out:
            self._procs.append(subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), *args], env=self.env,
                                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True))
        return log

    def start(self) -> None:
        for sub in ("logs", "work"):
            (self.base / sub).mkdir(parents=True, exist_ok=True)
        log = self._spawn("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                          "--port", str(self.port), "--webui-port", str(free_port()))
        _wait_for_port(self.port, open_=True, timeout=START_TIMEOUT, what="Spark master", log=log)
        log = self._spawn("worker", "org.apache.spark.deploy.worker.Worker", self.master_url, "--host", "127.0.0.1",
                          "--cores", str(self.cores), "--memory", "1g", "--webui-port", str(free_port()),
                          "--work-dir", str(self.base / "work"))
        deadline = time.monotonic() + START_TIMEOUT
        while "Successfully registered with master" not in log.read_text(errors="replace"):
            if time.monotonic() > deadline or self._procs[-1].poll() is not None:
                raise RuntimeError("Spark worker did not register:\n" + log.read_text(errors="replace")[-3000:])
            time.sleep(0.2)

    def processes(self) -> list[psutil.Process]:
        """The master, the worker and the executors the worker started (for CPU accounting)."""
        found: list[psutil.Process] = []
        for proc in self._procs:
            try:
                top = psutil.Process(proc.pid)
                found += [top, *top.children(recursive=True)]
            except psutil.Error:
                continue
        return found

    def stop(self) -> None:
        for proc in reversed(self._procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(30)
        self._procs.clear()
