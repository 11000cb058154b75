"""`mqbridge tables delete` on rows a bridge landed from ActiveMQ (local Parquet and local Delta
tables): the rows designated by identity and by `--where` go, exactly those, through the table's
own machinery (read back by pyarrow and delta-rs), logged with who and why; and a redelivery of a
deleted message is recognised by the ledger as landed and not landed again. The same deletion asked of
a running bridge by `POST /tables/delete` on its control plane, behind its token. On the Delta table,
the dry run and the deletion by `--where` run in the session's Delta-enabled driver (`delta_spark`,
`tests.support.delta_tables.run_in_driver`) rather than each in a driver of its own: the deletion by
identity is the command as a process, which starts its own driver with Delta."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support.amq import AmqClient, unique_queue
from tests.support.delta_tables import DELTA_SPARK, JARS, SMALL_TABLE_CONF, run_in_driver
from tests.support.exactly_once import free_port
from tests.support.http import get
from tests.support.monitored import running
from tests.support.object_stores import DeltaSpark
from tests.support.processes import mqbridge, run_until_idle, stomp_bridge
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

SPARK = {"parquet": 'master = "local[2]"', "delta": DELTA_SPARK}


def landed(table: Path, table_format: str) -> dict[str, tuple[str, str]]:
    """The rows of `table` by their order-id header: (msg_id, the landed identity or "")."""
    if table_format == "delta":
        import deltalake

        frame = deltalake.DeltaTable(str(table)).to_pyarrow_table(columns=["msg_id", "identity", "headers"])
    else:
        import pyarrow.dataset as ds

        frame = ds.dataset(str(table), format="parquet", partitioning="hive").to_table(columns=["msg_id", "headers"])
    rows = frame.to_pylist()
    by_order = {dict(r["headers"])["order-id"]: (r["msg_id"], r.get("identity") or "") for r in rows}
    assert len(by_order) == len(rows), f"an order landed twice: {sorted(by_order)}"
    return by_order


def tables_delete(config: Path, *args: str, driver: DeltaSpark | None = None) -> str:
    """`mqbridge tables delete --type orders ARGS`, expecting exit 0; its output (stdout and the log).
    A process of its own, or run in `driver` (the session's Delta-enabled one)."""
    if driver is not None:
        code, text = run_in_driver(driver, "tables", "delete", "--config", str(config), "--type", "orders", *args)
        assert code == 0, text
        return text
    proc = mqbridge("tables", "delete", "--config", str(config), "--type", "orders", *args)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    return str(out)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("table_format", ["parquet", "delta"])
def test_deleted_rows_are_exactly_those_designated_and_a_redelivery_does_not_land_them_again(
        tmp_path: Path, amq: AmqClient, table_format: str, request: pytest.FixtureRequest) -> None:
    if table_format == "delta" and not (JARS / "delta").is_dir():
        pytest.fail(f"the Delta Lake jars are missing from {JARS / 'delta'}: run scripts/jars.sh delta")
    # (Delta: the dry run and the deletion by --where in the session's Delta-enabled driver)
    driver: DeltaSpark | None = request.getfixturevalue("delta_spark") if table_format == "delta" else None
    # Given 20 orders landed by `mqbridge run --until-idle`, each known by its order-id header
    q = unique_queue(f"tables-delete-{table_format}")
    orders = [f"o-{n}" for n in range(20)]
    for order in orders:
        amq.put(q, f"order {order}".encode(), headers={"order-id": order})
    config = (stomp_bridge(q, spark=SPARK[table_format], extra_listener='identity = "header:order-id"')
              .set("spark.conf", **SMALL_TABLE_CONF).write(tmp_path / "bridge.toml"))
    run_until_idle(config)
    table = tmp_path / "landing" / "orders"
    before = landed(table, table_format)
    assert sorted(before) == sorted(orders)
    # When 3 are deleted by identity (Delta: the identity column, as the producer knows it, without
    # its queue scope; Parquet: its msg_id) and 2 by --where, the latter after a dry run
    by_identity = ["o-3", "o-4", "o-5"]
    ids = by_identity if table_format == "delta" else [before[o][0] for o in by_identity]
    out = tables_delete(config, "--identity", *ids, "--reason", "erasure request 42")
    assert "orders (" in out and ": deleted 3 rows in " in out, out
    assert "requested by OS user " in out and "reason: erasure request 42" in out, out
    where = "headers['order-id'] IN ('o-10', 'o-11')"
    out = tables_delete(config, "--where", where, "--reason", "wrongly landed", "--dry-run", driver=driver)
    assert "would delete 2 rows" in out, out
    assert sorted(landed(table, table_format)) == sorted(set(orders) - set(by_identity))  # the dry run changed nothing
    out = tables_delete(config, "--where", where, "--reason", "wrongly landed", driver=driver)
    assert ": deleted 2 rows in " in out and "reason: wrongly landed" in out, out
    # Then exactly those are gone, as a reader outside Spark sees the table
    gone = set(by_identity) | {"o-10", "o-11"}
    after = landed(table, table_format)
    assert sorted(after) == sorted(set(orders) - gone)
    assert all(after[o] == before[o] for o in after)  # the survivors are the same rows
    # When a deleted order and a surviving one are delivered again with their identities
    for order in ("o-3", "o-10", "o-0"):
        amq.put(q, f"order {order}".encode(), headers={"order-id": order})
    out = run_until_idle(config)
    # Then the ledger recognises them as landed: the deleted rows stay gone, nothing lands twice,
    # and the redeliveries left the queue (committed, not backed out)
    assert sorted(landed(table, table_format)) == sorted(set(orders) - gone), out[-4000:]
    assert amq.depth(q) == 0 and amq.depth(q + ".backout") == 0


TOKEN = "tables-delete-token-5c1e9a"


def post(url: str, document: object, token: str) -> tuple[int, str]:
    """POST `document` as JSON to `url` with the bearer `token`: (status, body)."""
    request = urllib.request.Request(url, data=json.dumps(document).encode(), method="POST",
                                     headers={"Authorization": f"Bearer {token}",
                                              "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.mark.timeout(600)
def test_post_tables_delete_on_a_running_bridge_needs_the_token_and_deletes_the_designated_rows(
        tmp_path: Path, amq: AmqClient) -> None:
    # Given a running bridge with a control-plane token that landed 20 orders into a Parquet table
    q = unique_queue("tables-delete-http")
    orders = [f"h-{n}" for n in range(20)]
    for order in orders:
        amq.put(q, f"order {order}".encode(), headers={"order-id": order})
    port = free_port()
    config = (stomp_bridge(q, extra_listener='identity = "header:order-id"')
              .set("spark.conf", **SMALL_TABLE_CONF)
              .set("monitoring", listen=f"127.0.0.1:{port}", token=TOKEN).write(tmp_path / "bridge.toml"))
    table = tmp_path / "landing" / "orders"
    url = f"http://127.0.0.1:{port}/tables/delete"
    request = {"type": "orders", "where": "headers['order-id'] IN ('h-1', 'h-2')", "reason": "ticket 9"}
    with running(config) as run:
        def all_committed() -> bool:  # landed before committed; the table is read once the bridge says so
            assert run.proc.poll() is None, run.text()[-5000:]
            code, text = get(f"http://127.0.0.1:{port}/status", token=TOKEN)
            return code == 200 and json.loads(text)["totals"]["messages_committed"] == 20
        wait_until(all_committed, 240, "the bridge's /status to count 20 messages committed")
        assert sorted(landed(table, "parquet")) == sorted(orders)
        # When a deletion is asked without the token, without a reason, and then as it should be
        code, text = post(url, request, "wrong-token-of-some-length")
        assert code == 401, text
        code, text = post(url, {**request, "reason": None}, TOKEN)
        assert code == 400 and '"reason"' in text, text
        code, text = post(url, request, TOKEN)
        # Then only the last deletes, and says what went per table; the log names the caller and why
        assert code == 200, f"{text}\n{run.text()[-4000:]}"
        answer = json.loads(text)
        assert answer["rows"] == 2 and [t["rows"] for t in answer["tables"]] == [2], answer
        assert sorted(landed(table, "parquet")) == sorted(set(orders) - {"h-1", "h-2"})
        wait_until(lambda: "control-plane caller 127.0.0.1" in run.text() and "reason: ticket 9" in run.text(), 30,
                   "the deletion's WARNING naming the caller and the reason")
