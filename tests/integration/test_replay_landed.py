"""A replay whose rows the bridge would drop as already landed says so before it sends (ActiveMQ,
`mqbridge` processes, real local Spark): messages with `identity = "header:hid"` land, the table is
lost and its rows replayed from a backup to the original queue. The replay is refused (exit 1, how
many, `--new-identity`) and sends nothing; with `--new-identity` each row lands again, once, with a
new `hid` and the old one in `mqbridge-replayed-hid`. Copies a replay made without it (as earlier
versions sent them) are dropped by the bridge with a warning that counts them.
"""

from __future__ import annotations

import collections
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.support.amq import AmqClient, unique_queue
from tests.support.bridge import read_table
from tests.support.exactly_once import account, bodies
from tests.support.processes import mqbridge, run_until_idle, stomp_config
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

MESSAGES = 20


def _run(*args: str, timeout: float = 240) -> tuple[int, str]:
    proc = mqbridge(*args)
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out


def test_a_replay_the_bridge_would_drop_is_refused_and_new_identity_lands_it(tmp_path: Path, spark: Any,
                                                                          amq: AmqClient) -> None:
    # Given messages landed by a bridge that knows them by the producer's header hid ...
    queue = unique_queue("replay-landed")
    sent = bodies(MESSAGES, "landed")
    for i, body in enumerate(sent):
        amq.put(queue, body, {"hid": f"order-{i}"})
    wait_until(lambda: amq.depth(queue) == MESSAGES, 30, "the messages to land on the queue")
    config = stomp_config(tmp_path, queue, threads=1, batch=50, extra_listener='identity = "header:hid"')
    run_until_idle(config, idle="2s")
    warehouse = tmp_path / "landing"
    assert sorted(bytes(r.body) for r in read_table(spark, warehouse / "orders")) == sorted(sent)
    # ... then the table is lost, and a backup of it is what is left
    shutil.copytree(warehouse / "orders", warehouse / "orders_backup")
    shutil.rmtree(warehouse / "orders")
    cli = ("replay", "--config", str(config), "--table", "orders_backup", "--to", queue, "--batch", "7")

    # When the backup's rows are replayed to the original queue
    code, out = _run(*cli)

    # Then the replay is refused before it sends: the bridge would drop every row (their hids are
    # still in the landing ledger)
    assert code == 1, out
    assert f"replay refused: {MESSAGES} of the {MESSAGES} rows to send would be dropped" in out, out
    assert "header:hid" in out and "--new-identity" in out and "Nothing was sent" in out, out
    assert amq.depth(queue) == 0
    assert "rows in 0 batches" not in out and "sent now" not in out, out

    # When it runs with --new-identity, and two copies a replay without the check sent (as earlier
    # versions did) are on the queue too
    code, out = _run(*cli, "--new-identity")
    assert code == 0 and f"{MESSAGES} rows sent now" in out, out
    assert "--new-identity: header hid gets a new value" in out, out
    for i in range(2):
        amq.put(queue, sent[i], {"hid": f"order-{i}", "mqbridge-replay-key": f"an-old-replay/{i}"})
    wait_until(lambda: amq.depth(queue) == MESSAGES + 2, 30, "the replayed rows and the two old copies on the queue")
    out = run_until_idle(config, idle="2s")

    # Then every row landed again, once, with a new hid that keeps the old one beside it ...
    rows = read_table(spark, warehouse / "orders")
    accounting = account(sent, collections.Counter(bytes(r.body) for r in rows))
    assert accounting.clean, accounting
    old = {body: f"order-{i}" for i, body in enumerate(sent)}
    for row in rows:
        assert row.headers["mqbridge-replayed-hid"] == old[bytes(row.body)]
        assert row.headers["hid"].startswith(old[bytes(row.body)] + ".replay-")
    # ... and the two old copies were dropped, with a warning that counts them
    warned = re.findall(r"WARNING.*: (\d+) replayed messages \(header mqbridge-replay-key\) were already landed", out)
    assert sum(int(n) for n in warned) == 2, out[-4000:]
    assert amq.depth(queue) == 0
