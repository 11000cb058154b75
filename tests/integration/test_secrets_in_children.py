"""No secret where another local user can read it: a real `mqbridge run` with its Spark driver JVM,
whose command line (`ps`, /proc/<pid>/cmdline) and environment (/proc/<pid>/environ) hold none
of the bridge's secrets, while the JVM did get the secret Spark settings (read back with `jcmd`,
the JDK's own tool, never printed)."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

import psutil
import pytest

from tests.support.exactly_once import free_port
from tests.support.monitored import running
from tests.support.processes import memory_bridge
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:  # the process ended meanwhile (spark-submit's launcher is short-lived)
        return b""


def _driver_jvm(bridge: int) -> psutil.Process | None:
    """The bridge's Spark driver JVM (SparkSubmit), once it runs."""
    for child in psutil.Process(bridge).children(recursive=True):
        try:
            if "org.apache.spark.deploy.SparkSubmit" in child.cmdline():
                return child
        except psutil.Error:
            continue
    return None


def _system_properties(pid: int) -> str:
    """The JVM's system properties (SparkSubmit makes each Spark setting one), '' until it answers."""
    done = subprocess.run([shutil.which("jcmd") or "jcmd", str(pid), "VM.system_properties"],
                          capture_output=True, text=True, timeout=60)
    return done.stdout if done.returncode == 0 else ""


def test_no_secret_on_a_command_line_or_in_a_child_environment(tmp_path: Path) -> None:
    # Given a bridge with secrets of every kind: a [spark.conf] key named like a credential, a
    # [spark.conf] value read from ${ENV:}, a STOMP password and the monitoring token from ${ENV:}
    tag = uuid.uuid4().hex[:12]
    secrets = {"s3": f"s3cr3t-key-{tag}", "referenced": f"ref3renced-{tag}", "stomp": f"stomp-pass-{tag}",
               "token": f"monitoring-token-{tag}"}
    toml = (memory_bridge("secrets", writer="spark")
            .set("monitoring", listen=f"127.0.0.1:{free_port()}", token="${ENV:MQB_TEST_TOKEN}")
            .set("sources.amq", kind="stomp", host="127.0.0.1", user="bridge", password="${ENV:MQB_TEST_STOMP}")
            .set("spark.conf", **{"spark.hadoop.fs.s3a.secret.key": secrets["s3"],
                                  "spark.mqbridge.test.referenced": "${ENV:MQB_TEST_REFERENCED}",
                                  "spark.sql.shuffle.partitions": "3"}))
    config = toml.write(tmp_path / "bridge.toml")
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    env = {"MQB_TEST_TOKEN": secrets["token"], "MQB_TEST_STOMP": secrets["stomp"],
           "MQB_TEST_REFERENCED": secrets["referenced"], "TMPDIR": str(private_tmp)}

    # When it runs, its Spark driver JVM started and answering
    with running(config, env_extra=env) as run:
        found: list[psutil.Process] = []

        def jvm_up() -> bool:
            assert run.proc.poll() is None, run.text()[-5000:]
            jvm = _driver_jvm(run.proc.pid)
            # SparkSubmit has made each setting a system property (the name alone is also in sun.java.command)
            if jvm is not None and "\nspark.app.name=" in _system_properties(jvm.pid):
                found.append(jvm)
                return True
            return False

        wait_until(jvm_up, 180, "the bridge's Spark driver JVM")
        jvm = found[0]
        processes = [psutil.Process(run.proc.pid), *psutil.Process(run.proc.pid).children(recursive=True)]
        listing = subprocess.run(["ps", "-eo", "args"], capture_output=True, check=True).stdout
        properties = _system_properties(jvm.pid)
        jvm_cmdline = _read(Path(f"/proc/{jvm.pid}/cmdline"))
        leftovers = sorted(p.name for p in private_tmp.glob("mqbridge-spark-*"))

        # Then no secret is on any command line (ps shows every user's), nor in the environment of
        # any process the bridge started (the JVM and whatever it started)
        exposed = []
        for name, secret in secrets.items():
            value = secret.encode()
            if value in listing:
                exposed.append(f"{name}: ps -eo args")
            for proc in processes:
                if value in _read(Path(f"/proc/{proc.pid}/cmdline")):
                    exposed.append(f"{name}: /proc/{proc.pid}/cmdline")
                if proc.pid != run.proc.pid and value in _read(Path(f"/proc/{proc.pid}/environ")):
                    exposed.append(f"{name}: /proc/{proc.pid}/environ")
        assert exposed == []
        # and the JVM did get both secret settings (through the properties file, since removed),
        # while the other settings stay on its command line
        got = {name: f"{key}={secrets[name]}" in properties
               for name, key in (("s3", "spark.hadoop.fs.s3a.secret.key"),
                                 ("referenced", "spark.mqbridge.test.referenced"))}
        assert got == {"s3": True, "referenced": True}
        assert b"--properties-file" in jvm_cmdline and b"spark.sql.shuffle.partitions=3" in jvm_cmdline
        assert leftovers == []
        # and the bridge's environment still has them (it reads ${ENV:} again on reload): only the
        # operator's own user can read /proc/<bridge>/environ
        assert secrets["token"].encode() in _read(Path(f"/proc/{run.proc.pid}/environ"))
    assert not any(secret in run.text() for secret in secrets.values())  # nor in its log
