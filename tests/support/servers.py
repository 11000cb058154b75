"""A server process of a test (a JVM the test starts itself: an Iceberg REST catalog, a Hive metastore):
started with its output in a log, waited for until it answers, stopped and its directory removed at the
end. Each wait says what it waited for, and the log's end, when it fails."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def server_process(what: str, argv: Sequence[str], *, base: Path, ready: Callable[[], bool], timeout: float,
                   env: Mapping[str, str] | None = None) -> Iterator[Path]:
    """Run `argv` in `base` (its output in `base`/server.log) until `ready()`; yield the log; terminate
    it (kill after 20 s) and remove `base` at the end. RuntimeError when it exits before it is ready,
    TimeoutError naming `what` after `timeout` seconds; both end with its log."""
    log = base / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(list(argv), cwd=base, env=dict(env) if env is not None else None, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            if proc.poll() is not None:
                raise RuntimeError(f"{what} exited with {proc.returncode}: {log.read_text(errors='replace')[-3000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout:.0f} s for {what} to answer; its log: "
                                   f"{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.2)
        yield log
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(base, ignore_errors=True)


def answers_http(url: str) -> Callable[[], bool]:
    """Whether GET `url` answers 200."""
    def ready() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False
    return ready


def port_open(port: int) -> bool:
    """Whether 127.0.0.1:`port` takes TCP connections now."""
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def takes_connections(port: int) -> Callable[[], bool]:
    """Whether 127.0.0.1:`port` takes TCP connections (a `ready` check of `server_process`)."""
    return lambda: port_open(port)
