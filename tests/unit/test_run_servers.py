"""tests/support/run_servers.py: the servers on fixed ports that the pytest-xdist workers of one test run
share. Two worker processes of one run use a stand-in server (a script that starts and stops a Python
process listening on a free port): it is started once, and stopped only when the last of them is done
and only if the run started it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.exactly_once import free_port
from tests.support.run_servers import ROOT
from tests.support.servers import port_open
from tests.support.waiting import wait_until

#: `server.sh start|stop`: a listener on $PORT in the background (its pid in server.pid); each action
#: appended to actions.log.
SCRIPT = """#!/usr/bin/env bash
set -euo pipefail
cd "$(dirname "$0")"
echo "$1" >> actions.log
case "$1" in
start) setsid "$PYTHON" -c 'import socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int("'"$PORT"'"))); s.listen()
while True: s.accept()' > /dev/null 2>&1 < /dev/null &
       echo $! > server.pid ;;
stop) kill "$(cat server.pid)" ;;
esac
"""

#: One worker: use the server until the file `release` appears (after writing `entered`).
WORKER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from tests.support.run_servers import run_server
    base, port = Path(sys.argv[1]), int(sys.argv[2])
    with run_server("server.sh", port, "the stand-in server", timeout=30, scripts=base, state_dir=base / "state"):
        (base / f"entered-{sys.argv[3]}").touch()
        while not (base / f"release-{sys.argv[3]}").exists():
            time.sleep(0.02)
""")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """The stand-in server's folder (its script, its log) and port; killed at the end if still running."""
    script = tmp_path / "server.sh"
    script.write_text(SCRIPT)
    script.chmod(0o755)
    port = free_port()
    yield tmp_path, port
    if (tmp_path / "server.pid").exists() and port_open(port):
        subprocess.run(["kill", (tmp_path / "server.pid").read_text().strip()], check=False)


def _worker(base: Path, port: int, name: str, run: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTEST_XDIST_TESTRUNUID": run, "PORT": str(port), "PYTHON": sys.executable}
    worker = subprocess.Popen([sys.executable, "-c", WORKER, str(base), str(port), name], cwd=ROOT, env=env)
    wait_until(lambda: (base / f"entered-{name}").exists() or worker.poll() is not None, 30,
               f"worker {name} to start using the server")
    assert worker.poll() is None, f"worker {name} exited with {worker.returncode} before using the server"
    return worker


def _release(base: Path, name: str, worker: subprocess.Popen[bytes]) -> None:
    (base / f"release-{name}").touch()
    assert worker.wait(30) == 0


def _actions(base: Path) -> list[str]:
    return (base / "actions.log").read_text().split() if (base / "actions.log").exists() else []


def test_two_workers_of_one_run_start_the_server_once_and_the_last_one_done_stops_it(
        server: tuple[Path, int]) -> None:
    base, port = server
    first = _worker(base, port, "a", "run-1")
    assert port_open(port) and _actions(base) == ["start"]
    second = _worker(base, port, "b", "run-1")
    assert _actions(base) == ["start"], "the second worker started the server again"
    _release(base, "a", first)
    assert port_open(port) and _actions(base) == ["start"], "the first worker done stopped the server under the second"
    _release(base, "b", second)
    assert _actions(base) == ["start", "stop"]
    wait_until(lambda: not port_open(port), 10, "the stand-in server to stop")


def test_a_server_running_before_the_run_is_left_running(server: tuple[Path, int]) -> None:
    base, port = server
    env = {**os.environ, "PORT": str(port), "PYTHON": sys.executable}
    subprocess.run([str(base / "server.sh"), "start"], env=env, check=True)
    wait_until(lambda: port_open(port), 10, "the stand-in server started before the run")
    _release(base, "a", _worker(base, port, "a", "run-2"))
    assert _actions(base) == ["start"] and port_open(port), "the run stopped a server it had not started"
