"""Where is message X, asked of a real `mqbridge run` (the shared ActiveMQ, a local Spark writing a JSON
type) through `GET /messages/<id>` with and without its token, and through `mqbridge where`: a
message held in flight by a bulk write that hangs (failpoint `spark_write_hang`, until `[spark]
write_timeout`) is in flight with its listener thread and bulk; once the write is cancelled and it
is landed again, landed with its table and put_date; a body that is not JSON, moved with its backout
queue and reason; an id nobody knows, unknown. Once the bridge is stopped, `mqbridge where` gives
the same answers from the ledger and the backout log."""

from __future__ import annotations

import json
import urllib.parse
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from mqbridge.config import parse_config
from tests.support.amq import AmqClient, unique_queue
from tests.support.http import fetch
from tests.support.monitored import outage_config, running
from tests.support.processes import mqbridge
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

TOKEN = "where-0123456789abcdef"
#: The bulk write holding the first message hangs this long before it is cancelled (an outage): the
#: in-flight checks made meanwhile (HTTP and one `mqbridge where`) took 1.3 s on a loaded 2-core
#: machine, so 15 s leaves them a tenfold margin (it was 30 s: 15 s of every run spent waiting).
WRITE_TIMEOUT = 15


def ask(url: str, key: str, token: str | None = TOKEN) -> tuple[int, dict[str, Any]]:
    """GET /messages/<key>: the status and the JSON answer ({} while nothing answers)."""
    response = fetch(f"{url}/messages/{urllib.parse.quote(key, safe='')}", token=token)
    return response.status, json.loads(response.text) if response.text.startswith("{") else {}


def where(config: Path, key: str, *options: str) -> tuple[int, str]:
    """`mqbridge where --config CONFIG KEY`: exit code and output."""
    proc = mqbridge("where", "--config", str(config), *options, key)
    out, _ = proc.communicate(timeout=60)
    return proc.returncode, out


def state(url: str, key: str) -> str | None:
    return ask(url, key)[1].get("state")


def test_in_flight_landed_moved_and_unknown_by_http_and_by_the_command(tmp_path: Path, amq: AmqClient) -> None:
    # Given a JSON order and a body that is not JSON on a queue, and a bridge whose monitoring needs a
    # token (/metrics and /healthz public) and whose first bulk write hangs for write_timeout
    q = unique_queue("where")
    amq.put(q, b'{"id": 1, "item": "held"}')
    amq.put_many(q, [b"not json at all"])
    held, poison = (frame.headers["message-id"] for frame in amq.browse(q))
    (tmp_path / "monitoring.token").write_text(TOKEN + "\n")
    config, url = outage_config(tmp_path, q, threads=1, batch=10, spark=f'write_timeout = "{WRITE_TIMEOUT}s"')
    text = config.read_text().replace("[types.orders]", '[types.orders]\nformat = "json"\n'
                                                        'schema = "id INT, item STRING"', 1)
    text = text.replace("[monitoring]", '[monitoring]\ntoken = "${FILE:monitoring.token}"\nmetrics_public = true', 1)
    config.write_text(text)
    parse_config(text, str(config))  # valid, before a bridge is started on it
    today = {datetime.now(timezone.utc).date().isoformat()}
    with running(config, env_extra={"MQBRIDGE_FAILPOINT": "spark_write_hang"}) as run:
        # When both are in the bulk whose write hangs
        wait_until(lambda: _bulk_state(url, held) == "writing", 240, "the held message's bulk write to hang")
        # Then the endpoint names the listener thread, the bulk and since when, with the token only
        code, doc = ask(url, held)
        assert code == 200 and doc["state"] == "in_flight", doc
        [entry] = doc["in_flight"]
        assert entry["listener"] == f"amq:{q}#1" and entry["unit"] in ("pending", "finishing")
        assert entry["bulk"].startswith("orders-") and entry["msg_id"] == held == entry["identity"]
        assert entry["queue"] == q and entry["received"] and entry["seconds_in_flight"] >= 0
        assert ask(url, poison)[1]["state"] == "in_flight"  # its result waits for the bulk's (or its own) write
        assert ask(url, held, token=None)[0] == 401
        assert ask(url, held, token="wrong-token-0123456789")[0] == 401
        assert fetch(url + "/metrics").status == 200  # public: the lookup is not
        code, out = where(config, held)
        assert code == 4 and f"{held} is IN FLIGHT (answered by the running bridge at {url})" in out, out
        assert f"listener   amq:{q}#1" in out and f"bulk       {entry['bulk']} (writing)" in out
        # When the write is cancelled at write_timeout (an outage) and the message lands on its next delivery
        wait_until(lambda: state(url, held) == "landed", 240, "the held message to land")
        wait_until(lambda: state(url, poison) == "moved", 60, "the poison message to be moved")
        today.add(datetime.now(timezone.utc).date().isoformat())
        # Then it is landed: table, put_date, bulk and when
        landed = ask(url, held)[1]["landed"]
        assert landed["table"] == "orders" and landed["put_date"] in today and landed["bulk"].startswith("orders-")
        assert landed["published"] and landed["identity"] == held
        code, out = where(config, held)
        assert code == 0 and f"{held} LANDED (answered by the running bridge" in out, out
        assert f"table      orders, put_date {landed['put_date']}" in out
        # And the body that is not JSON is moved: its backout queue, and why
        moved = ask(url, poison)[1]["moved"]
        assert moved["backout_queue"] == f"{q}.backout" and moved["queue"] == q and moved["msg_id"] == poison
        assert moved["reason"].startswith("body is not valid JSON for schema"), moved
        code, out = where(config, poison)
        assert code == 5 and f"moved to   {q}.backout at " in out, out
        # And an id nobody knows is unknown
        code, doc = ask(url, "ID:no-such-message")
        assert code == 200 and doc["state"] == "unknown"
        assert doc["searched"] == ["the running bridge", "the landing ledger", "the backout log"]
        assert where(config, "ID:no-such-message")[0] == 1
        assert [f.body for f in amq.drain(f"{q}.backout")] == [b"not json at all"]
    assert run.proc.returncode == 0, run.text()[-5000:]
    assert "failpoint spark_write_hang reached" in run.text()
    # When the bridge is stopped, Then the command answers from the ledger and the backout log itself
    code, out = where(config, held)
    assert code == 0 and f"{held} LANDED (answered by the landing ledger and the backout log)" in out
    assert "no running bridge was asked, so a message in flight is not seen: no bridge answers at" in out
    assert f"bulk       {landed['bulk']}, published " in out
    code, out = where(config, poison, "--json")
    doc = json.loads(out)
    assert code == 5 and doc["state"] == "moved" and doc["moved"]["reason"] == moved["reason"]
    code, out = where(config, "ID:no-such-message")
    assert code == 1 and "is UNKNOWN" in out and "no running bridge was asked" in out
    # And the backout log in the state_dir is private, and holds no body
    log = tmp_path / "state" / "backout.log"
    assert oct(log.stat().st_mode & 0o777) == "0o600" and "not json at all" not in log.read_text()


def _bulk_state(url: str, key: str) -> str | None:
    """The state of the bulk holding `key` in the bridge at `url` (None: none, or no answer yet)."""
    code, doc = ask(url, key)
    entries = (doc.get("in_flight") or [{}]) if code == 200 else [{}]
    return entries[0].get("bulk_state")
