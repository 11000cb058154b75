"""The command line on the real parts: kill -9 mid-stream and restart; configuration errors."""

from __future__ import annotations

import collections
import signal
import time
from pathlib import Path

import pytest

from tests.support.amq import AmqClient, unique_queue
from tests.support.bridge import read_table
from tests.support.processes import mqbridge, stomp_config
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


def parquet_files(path: Path) -> int:
    """Committed Parquet files of a table (Spark's _temporary dirs come and go meanwhile)."""
    try:
        return sum(1 for p in path.glob("put_date=*/*.parquet"))
    except OSError:
        return 0


def test_kill_9_mid_stream_then_restart_lands_every_message_once(tmp_path: Path, spark, amq: AmqClient) -> None:
    # Given a stream of messages and a bridge process draining it
    q = unique_queue("crash")
    bodies = [f"k{i}".encode() * 20 for i in range(20000)]
    amq.put_many(q, bodies)
    config = stomp_config(tmp_path, q)
    table = tmp_path / "landing" / "orders"
    first = mqbridge("run", "--config", str(config))
    try:
        # When it is killed with SIGKILL after the first bulks landed
        wait_until(lambda: parquet_files(table) >= 3 or first.poll() is not None, 180, "first bulks to land")
        assert first.poll() is None, first.stdout.read() if first.stdout else ""
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == -signal.SIGKILL
    assert amq.depth(q) > 0, "the test wants the kill to happen mid-stream"

    # And restarted until idle
    second = mqbridge("run", "--config", str(config), "--until-idle", "3s")
    out, _ = second.communicate(timeout=300)
    assert second.returncode == 0, out

    # Then every message landed exactly once (the landing ledger recognised the redeliveries)
    landed = collections.Counter(bytes(r.body) for r in read_table(spark, table))
    assert set(landed) == set(bodies), f"{len(set(bodies) - set(landed))} messages lost"
    assert sum(n - 1 for n in landed.values()) == 0, "duplicates"
    assert amq.depth(q) == 0


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ("[collector]\nmemroy = '1MB'\n", "collector.memroy"),
        ("[types.other]\nbulk_size = '5XB'\n", "types.other.bulk_size"),
        ("[[listeners]]\nsource = 'nope'\nqueue = '/queue/x'\nmessage_type = 'orders'\n", "listeners[1].source"),
        ("[sources.amq2]\nkind = 'stomp'\npassword = '${ENV:MQBRIDGE_TEST_UNSET_PW}'\n", "MQBRIDGE_TEST_UNSET_PW"),
    ],
)
def test_check_config_names_the_key_path(tmp_path: Path, toml: str, expected: str) -> None:
    path = stomp_config(tmp_path, "/queue/cfg")
    path.write_text(path.read_text() + toml)
    proc = mqbridge("check-config", str(path))
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1  # problems found (2 is for a file that cannot be read or is not TOML)
    errors = [line for line in out.splitlines() if line.strip() and ": warning: " not in line]
    assert len(errors) == 2, out  # the problem, then the summary
    assert str(path.name) in errors[0] and expected in errors[0]


def test_check_config_ok_and_version(tmp_path: Path) -> None:
    proc = mqbridge("check-config", str(stomp_config(tmp_path, "/queue/ok")))
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "OK" in out
    proc = mqbridge("--version")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and out.startswith("mqbridge ")


def test_sigterm_drains_and_exits_zero(tmp_path: Path, spark, amq: AmqClient) -> None:
    q = unique_queue("term")
    bodies = [f"t{i}".encode() for i in range(5000)]
    amq.put_many(q, bodies)
    config = stomp_config(tmp_path, q)
    table = tmp_path / "landing" / "orders"
    proc = mqbridge("run", "--config", str(config))
    wait_until(lambda: parquet_files(table) >= 1 or proc.poll() is not None, 180, "first bulk")
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=90)
    assert proc.returncode == 0, out
    assert time.monotonic() - start < 30
    landed = collections.Counter(bytes(r.body) for r in read_table(spark, table))
    assert all(n == 1 for n in landed.values()), "graceful shutdown must not duplicate"
    left = {f.body for f in amq.drain(q)}
    assert set(landed) | left == set(bodies) and not (set(landed) & left)
