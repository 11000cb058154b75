"""The servers one test run shares across its pytest processes: the brokers of scripts/activemq.sh
and scripts/rabbitmq.sh, the S3-compatible server of scripts/s3.sh and the HDFS mini cluster of
scripts/hdfs.sh, each on its fixed port.

scripts/test.sh runs the contract and integration tests on two pytest-xdist workers, and each worker
has its own session fixtures. Without a word between them, both would find the port free and start the
server twice, and the worker that finishes first would stop the server the other is still using. So
the first to come starts the server (under a lock file, which the kernel releases if the process dies),
every worker counts itself in a small state file beside it, and the last to leave stops the server,
if this run started it: one already running before the run (scripts/test.sh starts the brokers
itself; a developer may keep S3Proxy running) is left running. The state lives in `.test-cache/`
of the checkout (ignored by git); a state file of another run is stale and read as empty.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from tests.support.servers import port_open
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
STATE = ROOT / ".test-cache" / "run-servers"


def _this_run() -> str:
    """The id every worker of one pytest-xdist run shares (its controller's), or this process's own."""
    return os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid-{os.getpid()}"


@contextmanager
def _locked(state_dir: Path, script: str) -> Iterator[Path]:
    """Hold `script`'s lock in `state_dir`; yield its state file."""
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(state_dir / f"{script}.lock", "wb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        yield state_dir / f"{script}.json"


def _read(state: Path) -> dict[str, Any]:
    """This run's record of the server: who started it, how many of its processes use it."""
    record: dict[str, Any] = {}
    with suppress(OSError, ValueError, TypeError):  # none yet, or half written by a process that died
        record = dict(json.loads(state.read_text()))
    if record.get("run") != _this_run():
        record = {"run": _this_run(), "started": False, "users": 0}
    return record


@contextmanager
def run_server(script: str, port: int, what: str, *, timeout: float, scripts: Path = ROOT / "scripts",
               state_dir: Path = STATE) -> Iterator[bool]:
    """`scripts`/`script`'s server on 127.0.0.1:`port` (`script start` starts it, `script stop` stops
    it), started when nothing answers there; yield whether this run started it. It is stopped when the
    last process of this run that uses it is done, and only if this run started it. TimeoutError naming
    `what` if it does not answer within `timeout` s."""
    with _locked(state_dir, script) as state:
        record = _read(state)
        if not port_open(port):
            subprocess.run([str(scripts / script), "start"], cwd=ROOT, check=True, timeout=timeout + 60)
            record["started"] = True
        record["users"] += 1
        state.write_text(json.dumps(record))
    wait_until(lambda: port_open(port), timeout, f"{what} on 127.0.0.1:{port}")
    try:
        yield bool(record["started"])
    finally:
        with _locked(state_dir, script) as state:
            record = _read(state)
            record["users"] -= 1
            last = record["users"] <= 0
            state.write_text(json.dumps(record))
            if last and record["started"]:
                subprocess.run([str(scripts / script), "stop"], cwd=ROOT, check=False, timeout=120)
                state.unlink()
