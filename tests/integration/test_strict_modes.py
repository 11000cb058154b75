"""Files the bridge trusts, on a real `mqbridge run` (ActiveMQ, pyarrow-staged bulks): its state
and staging are private whatever the umask; a state_dir other users may write stops the start
before anything is read; a ledger naming a path outside the warehouse stops recovery before any
file is touched."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from mqbridge.landing.ledger import SqliteLedger, ledger_path
from tests.support.amq import AmqClient, unique_queue
from tests.support.ledger import dead_owner
from tests.support.processes import mqbridge, stomp_config

pytestmark = [pytest.mark.integration, pytest.mark.skipif(os.name == "nt", reason="POSIX modes")]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_run_under_umask_000_keeps_the_state_dir_ledger_and_staging_private(tmp_path: Path,
                                                                               amq: AmqClient) -> None:
    # Given messages and a bridge started with a umask that would make every file world-writable
    q = unique_queue("modes")
    amq.put_many(q, [f"m{n}".encode() for n in range(50)])
    proc = mqbridge("run", "--config", str(stomp_config(tmp_path, q)), "--until-idle", "3s", umask=0)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    # Then what it created for itself is its own: 0700 directories, a 0600 ledger
    state = tmp_path / "state"
    assert (mode(state), mode(ledger_path(state))) == (0o700, 0o600)
    assert mode(tmp_path / "landing" / "orders" / "_staging") == 0o700
    assert amq.depth(q) == 0
    # And the next start accepts them
    again = mqbridge("run", "--config", str(stomp_config(tmp_path, q)), "--until-idle", "1s")
    out, _ = again.communicate(timeout=300)
    assert again.returncode == 0, out


@pytest.mark.parametrize(("bits", "said"), [(0o770, "group-writable (mode 0770)"),
                                            (0o777, "world-writable (mode 0777)")], ids=["group", "world"])
def test_a_state_dir_others_may_write_stops_the_start_before_anything_is_read(
        tmp_path: Path, amq: AmqClient, bits: int, said: str) -> None:
    q = unique_queue("modes")
    amq.put_many(q, [b"a", b"b"])
    state = tmp_path / "state"
    state.mkdir()
    os.chmod(state, bits)
    proc = mqbridge("run", "--config", str(stomp_config(tmp_path, q)), "--until-idle", "2s")
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 2, out
    assert f"configuration error: state_dir {state} is {said}" in out and f"(fix: chmod go-w {state})" in out
    assert not ledger_path(state).exists() and amq.depth(q) == 2


def test_a_ledger_naming_a_path_outside_the_warehouse_stops_recovery_before_any_file_moves(
        tmp_path: Path, amq: AmqClient) -> None:
    # Given a ledger into which someone wrote a "prepared bulk" of a dead process aimed at a file
    # outside the warehouse
    q = unique_queue("modes")
    amq.put_many(q, [b"a"])
    config = stomp_config(tmp_path, q)
    victim = tmp_path / "elsewhere" / "precious.txt"
    victim.parent.mkdir()
    victim.write_text("keep me")
    final = tmp_path / "landing" / "orders" / "put_date=2024-01-01" / "part-orders-x-00000001-00000.parquet"
    ledger = SqliteLedger.open(ledger_path(tmp_path / "state"), owner=dead_owner())
    ledger.prepare("orders-x-00000001", "orders", [(str(victim), str(final))], ["m1"])
    ledger.close()
    # When the bridge starts
    proc = mqbridge("run", "--config", str(config), "--until-idle", "2s")
    out, _ = proc.communicate(timeout=300)
    # Then it stops, naming the bulk and the path, and has moved nothing nor read any message
    assert proc.returncode == 1, out
    assert "prepared bulk orders-x-00000001" in out and "names a path outside the warehouse's tables" in out
    assert victim.read_text() == "keep me" and not final.exists()
    assert amq.depth(q) == 1
