"""`mqbridge run --until-idle` on a terminal shows one live progress line (the real CLI under a
pseudo-terminal); with its output in a pipe the per-tick summary stays a log line."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mqbridge.monitoring.progress import CLEAR
from tests.support.amq import AmqClient, unique_queue
from tests.support.exactly_once import bodies
from tests.support.processes import ROOT, run_until_idle, stomp_config

pytestmark = pytest.mark.integration


def run_on_a_terminal(config: Path, timeout: float = 240) -> str:
    """`mqbridge run --until-idle 2s` with a pseudo-terminal as stdout and stderr; all it wrote."""
    main, terminal = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k != "MQBRIDGE_FAILPOINT"}
    proc = subprocess.Popen([sys.executable, "-m", "mqbridge", "run", "--config", str(config), "--until-idle", "2s"],
                            cwd=ROOT, stdin=subprocess.DEVNULL, stdout=terminal, stderr=terminal, env=env)
    os.close(terminal)
    out = bytearray()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the terminal's other end closed: the process ended
            break
        if not chunk:
            break
        out += chunk
    os.close(main)
    assert proc.wait(30) == 0, out.decode(errors="replace")[-3000:]
    return out.decode(errors="replace")


def test_a_terminal_gets_one_live_progress_line_and_a_pipe_gets_log_lines(tmp_path: Path, amq: AmqClient) -> None:
    # Given 300 messages, and a bridge run on a terminal
    q = unique_queue("progress")
    amq.put_many(q, bodies(300, "p"))
    out = run_on_a_terminal(stomp_config(tmp_path, q, threads=1, batch=100))
    # Then the line is redrawn in place and ends with every message committed, and the summary
    # log lines are not printed
    assert CLEAR + "received 300 | committed 300" in out, out[-3000:]
    assert "to backout queue 0" in out and "/s)" in out
    assert "threads 1/1 created=" not in out.split("stopping")[0], out[-3000:]
    # When the same runs with its output in a pipe (a service, CI)
    q2 = unique_queue("progress-pipe")
    amq.put_many(q2, bodies(300, "p"))
    (tmp_path / "pipe").mkdir()
    piped = run_until_idle(stomp_config(tmp_path / "pipe", q2, threads=1, batch=100))
    # Then there is no progress line, and the per-tick summary is a log line
    assert CLEAR not in piped and "received 300" not in piped
    # and neither output has a raw JVM line (Spark's launcher makes Java print one at every start)
    assert "Using incubator modules" not in piped and "Using incubator modules" not in out
    assert "[Stage " not in piped and "[Stage " not in out
    assert "committed=300" in piped
