"""The status page (`GET /` on the monitoring endpoint) in a real headless browser (Debian's
`chromium`): it renders the live values of a running bridge — its version and uptime, the links to
the raw endpoints, its listener, committed count, Spark and memory, the messages moved to the
backout queue with their reasons, the run-time control of a listener an operator paused — and,
after a few of its polls of /status, charts with drawn points; a screenshot is kept in the output,
and the charts' lines are found among its pixels.
The chart's arithmetic (committed/s between polls, none across a restart) is checked against a
scripted /status."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from mqbridge.monitoring.page import PAGE
from tests.support.amq import AmqClient, unique_queue
from tests.support.bridge import listener_toml, make_config
from tests.support.http import get
from tests.support.png import pixels
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

JSON_TYPE = """
[types.orders]
format = "json"
schema = "order_id STRING, amount DOUBLE"
bulk_size = "1MB"
bulk_timeout = "1s"
"""


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail("chromium is not installed: scripts/test-tools.sh installs it")
    return found


def browse(url: str, *args: str, budget_ms: int = 8000) -> subprocess.CompletedProcess[str]:
    """Headless Chromium on `url`, with `budget_ms` of virtual time (the page's clock and timers;
    it stands still while a fetch is pending) for the page's script to poll /status and render."""
    return subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                           "--hide-scrollbars", f"--virtual-time-budget={budget_ms}", *args, url],
                          capture_output=True, text=True, timeout=120)


class ScriptedStatus(ThreadingHTTPServer):
    """The status page, and a /status whose totals follow `script`: (committed, waiting in the
    collector) for each request in turn, the last one repeated; `polls` counts the requests."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _ScriptedHandler)
        self.script: list[tuple[int, int]] = [(0, 0)]
        self.polls = 0


class _ScriptedHandler(BaseHTTPRequestHandler):
    server: ScriptedStatus

    def do_GET(self) -> None:  # noqa: N802 -- http.server's naming
        if self.path.startswith("/status"):
            committed, waiting = self.server.script[min(self.server.polls, len(self.server.script) - 1)]
            self.server.polls += 1
            body = json.dumps({"name": "scripted", "listeners": [], "totals": {"messages_committed": committed},
                               "collector": {"messages": waiting}}).encode()
        else:
            body = PAGE.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def scripted() -> Iterator[ScriptedStatus]:
    """The status page with a scripted /status (no bridge), on a free loopback port."""
    server = ScriptedStatus()
    thread = threading.Thread(target=server.serve_forever, name="scripted-status", daemon=True)
    thread.start()
    yield server
    server.shutdown()
    thread.join(5)
    server.server_close()


def chart_points(dom: str, name: str) -> list[tuple[float, float]]:
    """The points of chart `name`'s line, as the page's script drew them into the DOM."""
    svg = re.search(rf'<svg class="chart" id="chart-{name}"[^>]*data-points="(\d+)".*?</svg>', dom, re.S)
    assert svg is not None, f"no chart {name} in the page"
    line = re.search(r'<polyline class="line" points="([^"]*)"', svg.group(0))
    assert line is not None, svg.group(0)
    points = [(float(x), float(y)) for x, y in re.findall(r"([\d.]+),([\d.]+)", line.group(1))]
    assert len(points) == int(svg.group(1)), svg.group(0)  # the count the page announces is the one it drew
    return points


def test_the_status_page_renders_the_live_bridge(tmp_path: Path, amq: AmqClient,
                                                 monitored: Any) -> None:
    # Given a bridge that landed 40 orders and moved 2 malformed ones to its backout queue
    q = unique_queue("page")
    amq.put_many(q, [json.dumps({"order_id": f"o{i}", "amount": i}).encode() for i in range(40)]
                 + [b"{not json", b"[1, 2"])
    cfg = make_config(tmp_path, JSON_TYPE + listener_toml(q, "orders", batch=50))
    bridge, monitor = monitored(cfg)
    wait_until(lambda: bridge.counters.total("messages_committed") + bridge.counters.total(
        "messages_moved_to_backout") == 42, 180, "42 messages settled")
    # and an operator paused its listener (mqbridge listener pause)
    bridge.controls.command(q, "pause")
    wait_until(lambda: bridge.status()["listener_controls"][0]["in_effect"], 30, "the pause")
    code, html = get(monitor.url + "/")
    assert code == 200 and "<title>mqbridge</title>" in html and "http" not in html.split("<script>")[0].lower()
    # When a browser opens the page
    result = browse(monitor.url + "/", "--dump-dom")
    dom = result.stdout
    assert result.returncode == 0, result.stderr[-2000:]
    # Then it shows the live values and the backout reasons
    status = json.loads(get(monitor.url + "/status")[1])
    listener = status["listeners"][0]
    assert listener["name"] in dom and listener["phase"] in dom
    assert ">40<" in dom  # committed, in the listeners table
    assert dom.count("body is not valid JSON for schema") == 2
    # and its run-time control: paused, its thread count, in effect
    controls = re.search(r'id="controls">.*?</table>', dom, re.S)
    assert controls is not None and (f'<tr><td>amq:{q}</td><td class="warn">paused</td><td>1</td><td>1</td>'
                                     '<td>yes</td><td>pause at ') in controls.group(0), dom[-4000:]
    assert '<span id="health" class="ok">healthy</span>' in dom  # /status answered and says healthy
    assert re.search(r'<span class="muted" id="updated">updated \d\d:\d\d:\d\d UTC</span>', dom)
    # and the version, the uptime and the links to the raw endpoints
    assert f'<span class="muted" id="version">version {status["version"]}</span>' in dom
    assert re.search(r'<span id="uptime">up \d+(s|m \d+s|h \d+m)</span>', dom)
    for path in ("status", "metrics", "healthz"):
        assert f'<a href="{path}">/{path}</a>' in dom
    # and how Spark is reached, that it answers, and the memory of the bridge and its collector
    assert f"<th>Spark</th><td>local, master {status['spark']['master']}</td>" in dom
    assert '<th>Spark reachable</th><td class="ok">yes</td>' in dom
    assert re.search(r"<th>bridge process</th><td>RSS \d+\.\d MB \(no memory guard", dom)
    limit = f"{status['collector_limits']['memory'] / 1048576:.1f} MB"
    assert re.search(rf"<th>collector memory</th><td>\d+\.\d MB of {re.escape(limit)}, 0 messages waiting", dom)
    # and the chart of the last minutes has drawn the page's polls (every 3 s of the browser's
    # 8 s): a backlog point per poll, a committed/s point per two polls, none of them above 0 now
    # that every message has settled
    backlog, rate = chart_points(dom, "backlog"), chart_points(dom, "rate")
    assert len(backlog) >= 3 and len(rate) == len(backlog) - 1, (backlog, rate)
    assert {y for _, y in backlog + rate} == {90.0}  # the x axis: 0
    assert [x for x, _ in backlog] == sorted(x for x, _ in backlog) and backlog[-1][0] == 396.0  # ends at "now"
    # And a screenshot is kept for a person to look at
    shot = tmp_path / "status-page.png"
    result = browse(monitor.url + "/", f"--screenshot={shot}", "--window-size=1280,1000")
    assert result.returncode == 0 and shot.stat().st_size > 10_000, result.stderr[-2000:]
    # in which the charts' lines are drawn: pixels of their colour, which nothing else on the page has
    colour = re.search(r"\.line \{ fill: none; stroke: #([0-9a-f]{6});", PAGE)
    assert colour is not None
    line = tuple(bytes.fromhex(colour.group(1)))
    assert sum(1 for pixel in pixels(shot) if pixel == line) >= 200
    print(f"status page screenshot: {shot}")


def test_the_chart_plots_committed_per_second_between_polls_and_skips_a_restart(
        scripted: ScriptedStatus) -> None:
    # Given a /status whose committed total grows by 30 a poll, then starts again from 10 (the
    # bridge restarted), and whose collector holds 5, 10, 15 and 20 messages
    scripted.script = [(100, 5), (130, 10), (10, 15), (40, 20)]
    # When the page polls it 4 times, 3 s apart on the browser's clock
    result = browse(f"http://127.0.0.1:{scripted.server_port}/", "--dump-dom", budget_ms=10_000)
    assert result.returncode == 0, result.stderr[-2000:]
    dom = result.stdout
    assert scripted.polls == 4
    # Then the rate is 30 messages in 3 s where the total grew, and no point across the restart
    rate = chart_points(dom, "rate")
    assert len(rate) == 2 and '<b id="rate-now">10/s</b>' in dom, dom[-3000:]
    top = re.search(r'id="chart-rate".*?<text class="top"[^>]*>(\d+)/s<', dom, re.S)
    assert top is not None
    values = [(90 - y) / (90 - 8) * int(top.group(1)) for _, y in rate]  # the y axis: 90 is 0, 8 the top
    assert all(9.5 < v < 10.5 for v in values), values  # not 30/3 to the digit: a poll's fetch takes time
    # and the backlog has a point per poll, rising to 20, the top of its axis
    backlog = chart_points(dom, "backlog")
    assert [y for _, y in backlog] == [69.5, 49.0, 28.5, 8.0] and '<b id="backlog-now">20</b>' in dom
