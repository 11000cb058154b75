"""Run-time control of a real `mqbridge run` under load: a producer puts messages on the real ActiveMQ
while the bridge lands them with Spark (the default writer), and `mqbridge listener` pauses it (the
queue's depth, browsed on the broker, grows while nothing is committed), SIGHUP keeps it paused,
resume drains it, `threads` takes it from 1 to 3 threads (shown in /status and the metrics), stop
ends its threads and start brings them back; then every message is accounted for: none lost, none
duplicated. And the errors-per-second metric against a known error rate: listener threads whose
connections a TCP proxy cuts a known number of times within one control interval."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.amq import AmqClient, unique_queue
from tests.support.exactly_once import OutputReader, account, free_port
from tests.support.http import get
from tests.support.processes import ROOT, landed, mqbridge, stomp_bridge
from tests.support.tcpproxy import TcpProxy
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

TOKEN = "listener-control-token-5e1f0c"
#: Messages per second the producer puts: a pause of 15 s leaves a few hundred on the queue (a STOMP
#: browse of ActiveMQ sees at most 400: its maxBrowsePageSize).
RATE = 15


class Producer:
    """Puts `RATE` messages a second on `queue` from a thread of its own until stopped; `sent` holds
    every body put."""

    def __init__(self, queue: str, tag: str) -> None:
        self.queue, self.tag = queue, tag
        self.sent: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="producer", daemon=True)
        self.error: BaseException | None = None

    def start(self) -> Producer:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            with AmqClient() as client:
                started = time.monotonic()
                while not self._stop.is_set():
                    due = int((time.monotonic() - started) * RATE) + 1
                    while len(self.sent) < due:
                        body = f"{self.tag}-{len(self.sent):06d}:".encode() + bytes(range(256))
                        client.put(self.queue, body)
                        self.sent.append(body)
                    self._stop.wait(0.05)
                client._sync()  # every message sent is on the broker
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def stop(self) -> list[bytes]:
        self._stop.set()
        self._thread.join(60)
        assert self.error is None, self.error
        return list(self.sent)


class Bridge:
    """The `mqbridge run` process and its endpoint: status, metrics, and `mqbridge listener` commands."""

    def __init__(self, config: Path, url: str, queue: str) -> None:
        self.config, self.url, self.queue = config, url, queue
        self.label = f"amq:{queue}"
        self.run = OutputReader(mqbridge("run", "--config", str(config)))

    def status(self) -> dict[str, Any]:
        code, text = get(self.url + "/status", token=TOKEN)
        assert code == 200, (code, text, self.run.text()[-3000:])
        return dict(json.loads(text))

    def control(self) -> dict[str, Any]:
        [entry] = [c for c in self.status()["listener_controls"] if c["name"] == self.label]
        return dict(entry)

    def committed(self) -> float:
        return float(self.status()["totals"]["messages_committed"])

    def metric(self, line_start: str) -> float:
        code, text = get(self.url + "/metrics", token=TOKEN)
        assert code == 200
        [value] = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(line_start)]
        return value

    def listener(self, *args: str) -> str:
        """`mqbridge listener ARGS` with this configuration; its output, once it exited 0."""
        action, *rest = args
        done = subprocess.run([sys.executable, "-m", "mqbridge", "listener", action, "--config", str(self.config),
                               self.queue, *rest], capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert done.returncode == 0, (done.stdout, done.stderr, self.run.text()[-3000:])
        return done.stdout


@contextmanager
def bridge_under_load(tmp_path: Path, queue: str, producer: Producer) -> Iterator[Bridge]:
    """The bridge of `queue` (one listener thread, Spark writing every bulk, the endpoint with a token)
    running while the producer puts; SIGTERM at the end (if still running)."""
    (tmp_path / "monitoring.token").write_text(TOKEN + "\n")
    (tmp_path / "monitoring.token").chmod(0o600)
    port = free_port()
    config = (stomp_bridge(queue, threads=1, batch=100)
              .set("spark", writer="spark")
              .set("monitoring", listen=f"127.0.0.1:{port}", token="${FILE:monitoring.token}")
              .write(tmp_path / "bridge.toml"))
    bridge = Bridge(config, f"http://127.0.0.1:{port}", queue)
    try:
        yield bridge
    finally:
        bridge.run.terminate()
        producer.stop()


def held_still(bridge: Bridge, amq: AmqClient, seconds: float) -> tuple[int, int]:
    """Over `seconds` while the producer puts: nothing is committed; (depth before, depth after)."""
    committed, before = bridge.committed(), amq.depth(bridge.queue)
    time.sleep(seconds)
    after = amq.depth(bridge.queue)
    assert bridge.committed() == committed, "committed while paused or stopped"
    return before, after


def drained(bridge: Bridge, amq: AmqClient, what: str) -> None:
    """The queue is drained down to what the producer put in the last few seconds."""
    wait_until(lambda: amq.depth(bridge.queue) <= 3 * RATE, 120, what)


@pytest.mark.timeout(600)
def test_pause_resume_threads_stop_and_start_under_load_lose_and_duplicate_nothing(
        tmp_path: Path, spark: Any, amq: AmqClient) -> None:
    queue = unique_queue("control")
    producer = Producer(queue, "ctl").start()
    with bridge_under_load(tmp_path, queue, producer) as bridge:
        wait_until(lambda: bridge.run.proc.poll() is None and get(bridge.url + "/healthz")[0] != 0, 120,
                   "the endpoint")
        wait_until(lambda: bridge.committed() > 0, 240, "a first commit (Spark started)")
        drained(bridge, amq, "what was put while Spark started to drain")

        # When the listener is paused
        out = bridge.listener("pause")
        assert f"{bridge.label}: in effect: paused, 1 threads, 1 alive" in out, out
        # Then its thread waits holding nothing, connected; nothing is committed while the depth grows
        assert [(e["alive"], e["phase"], e["state"]) for e in bridge.status()["listeners"]] == [(True, "paused",
                                                                                                "paused")]
        before, after = held_still(bridge, amq, 6)
        assert after >= before + 3 * RATE, (before, after)
        assert bridge.metric(f'mqbridge_listener_state{{listener="{bridge.label}",state="paused"}}') == 1
        assert not [p for p in bridge.status()["health"]["problems"] if "listener" in p]

        # When the configuration is reloaded (SIGHUP), then it stays paused
        bridge.run.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "reload: configuration unchanged" in bridge.run.text(), 30, "the reload")
        _, later = held_still(bridge, amq, 3)
        assert later > after and bridge.control()["state"] == "paused"
        assert bridge.status()["listeners"][0]["phase"] == "paused"

        # When it is resumed, then it drains the queue
        assert "in effect: running, 1 threads, 1 alive" in bridge.listener("resume")
        drained(bridge, amq, "the queue to drain after resume")

        # When it gets 3 threads, then /status and the metrics show them, each reading
        out = bridge.listener("threads", "3")
        assert "in effect: running, 3 threads (configured: 1), 3 alive" in out, out
        threads = bridge.status()["listeners"]
        assert [(e["name"], e["alive"]) for e in threads] == [(f"{bridge.label}#{i}", True) for i in (1, 2, 3)]
        assert bridge.metric(f'mqbridge_listener_threads{{listener="{bridge.label}"}}') == 3
        wait_until(lambda: bridge.metric("mqbridge_listener_threads_actual") == 3, 10, "3 threads alive")

        # When it is stopped, then its threads end, nothing is committed, the depth grows
        assert "in effect: stopped, 3 threads (configured: 1), 0 alive" in bridge.listener("stop")
        assert [(e["alive"], e["phase"]) for e in bridge.status()["listeners"]] == [(False, "stopped")] * 3
        before, after = held_still(bridge, amq, 5)
        assert after >= before + 3 * RATE, (before, after)
        assert not [p for p in bridge.status()["health"]["problems"] if "listener" in p]

        # When it is started again, then its 3 threads read again and drain the queue
        assert "in effect: running, 3 threads (configured: 1), 3 alive" in bridge.listener("start")
        drained(bridge, amq, "the queue to drain after start")

        # Finally, once the producer stopped, every message is committed
        sent = producer.stop()
        wait_until(lambda: bridge.committed() >= len(sent) and amq.depth(queue) == 0, 180, "every message committed")
        assert bridge.run.terminate() == 0, bridge.run.text()[-5000:]
    text = bridge.run.text()
    assert "listener thread failed" not in text and "restarting in" not in text, text[-5000:]
    # And every message put is in the table once: lost 0, duplicated 0, unexpected 0
    accounting = account(sent, landed(spark, tmp_path / "landing" / "orders"))
    assert accounting.clean, str(accounting)
    assert len(sent) > 20 * RATE and amq.depth(queue + ".backout") == 0


# -- errors per second ---------------------------------------------------------------------------
#: The summary line's "errors/s" field, logged right after the rate is measured each control interval.
ERRORS_PER_SECOND = re.compile(r"errors/s=(\d+\.\d+)")
INTERVAL = 6.0
THREADS = 4


def _summaries(run: OutputReader) -> list[float]:
    return [float(m.group(1)) for line in list(run.lines) if (m := ERRORS_PER_SECOND.search(line))]


def _next_interval(run: OutputReader) -> float:
    """Wait for the end of the current control interval; the errors/s the summary line gives for it."""
    seen = len(_summaries(run))
    wait_until(lambda: len(_summaries(run)) > seen, 3 * INTERVAL, "a summary line")
    return _summaries(run)[seen]


@pytest.mark.timeout(300)
def test_errors_per_second_is_the_listener_errors_of_one_control_interval_over_its_length(
        tmp_path: Path, activemq: tuple[str, int]) -> None:
    # Given 4 listener threads connected to ActiveMQ through a TCP proxy, one connection each (and
    # no other), and a control interval of 6 s (no Spark: the queue stays empty)
    proxy = TcpProxy(activemq)
    port = free_port()
    config = (stomp_bridge(unique_queue("errors"), port=proxy.port, threads=THREADS, extra_listener="in_flight = 1")
              # no backlog poller: its own connection would go through the proxy too, and be cut
              .set("bridge", control_interval=f"{INTERVAL:.0f}s", backlog_interval="0s")
              .set("monitoring", listen=f"127.0.0.1:{port}")
              .write(tmp_path / "bridge.toml"))
    url = f"http://127.0.0.1:{port}"
    run = OutputReader(mqbridge("run", "--config", str(config)))
    try:
        run.wait_subscribed(THREADS)

        def metrics() -> tuple[float, float]:
            """(mqbridge_errors_per_second, mqbridge_listener_errors_total summed over the listeners)."""
            code, text = get(url + "/metrics")
            assert code == 200
            rate = re.search(r"^mqbridge_errors_per_second (\S+)$", text, re.M)
            assert rate is not None
            errors = re.findall(r"^mqbridge_listener_errors_total\{[^}]*\} (\S+)$", text, re.M)
            return float(rate.group(1)), sum(float(v) for v in errors)

        def cut_and_reconnect() -> None:
            accepted = proxy.accepted
            assert proxy.cut() == THREADS
            wait_until(lambda: proxy.accepted >= accepted + THREADS, 5.0, "every thread to reconnect")

        _next_interval(run)
        for cuts in (1, 0, 2):
            # When, within one control interval (the one that began at the summary line just seen:
            # the first, or the one after the interval measured last), the proxy cuts every connection
            # `cuts` times (each cut ends every listener thread: 4 errors; they reconnect after their
            # backoff)
            _, before = metrics()
            for _ in range(cuts):
                cut_and_reconnect()
            # Then that interval counted 4 × cuts listener errors, and its errors per second are those
            # errors over its length: 6 s, or a little more (the first control tick past the interval's
            # end measures it: up to 0.25 s later, more on a busy machine), in /metrics and in the log
            logged = _next_interval(run)
            measured, after = metrics()
            errors = THREADS * cuts
            assert after - before == errors, (cuts, before, after)
            assert errors / (INTERVAL + 1.0) <= measured <= errors / INTERVAL, (cuts, measured)
            assert logged == pytest.approx(measured, abs=0.006)
        assert run.terminate() == 0
    finally:
        run.terminate()
        proxy.close()
