"""The one clock of a ledger shared by bridges on several hosts (issue 51): PostgreSQL's. A bulk's
`prepared_at` and `published_at` are stamped, and a new forward of `mqbridge follow` starts, by the
database server's clock, as the owners' heartbeats are judged (tests/integration/test_shared_faults.py),
never by the clock of the bridge that writes them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator

import psycopg
import pytest

from tests.support.postgres import PostgresServer, postgres_server
from tests.support.processes import ROOT

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresServer]:
    with postgres_server() as server:
        yield server


def test_a_process_ten_minutes_ahead_stamps_its_bulks_and_reads_the_time_by_the_servers_clock(
        pg: PostgresServer) -> None:
    """Bulks stamped by each bridge's own clock would put a bridge 10 minutes ahead's publications
    in the future: `mqbridge follow` moves its mark to the newest publication it forwarded and looks
    back 5 minutes from it, so it would pass over what the other bridges publish meanwhile. The ledger
    stamps `prepared_at` and `published_at` by the database server's clock, and tells that clock
    (`Ledger.clock`: where a new forward starts)."""
    if shutil.which("faketime") is None:
        pytest.fail("faketime is missing: run scripts/test-tools.sh (Debian's faketime package)")
    # Given a process whose clock is 10 minutes ahead (libfaketime) that prepares and publishes a bulk
    script = ("import json, os, time\n"
              "from mqbridge.landing.ledger.postgres import PostgresLedger\n"
              "ledger = PostgresLedger.open_url(os.environ['LEDGER_URL'], owner='ahead-host:1:1.00', schema='clock')\n"
              "ledger.prepare('ahead-1', 'orders', [], ['m-ahead'])\n"
              "ledger.mark_published('ahead-1')\n"
              "print(json.dumps({'own': time.time(), 'ledger': ledger.clock()}))\n")
    env = {**os.environ, "LEDGER_URL": pg.url, "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    done = subprocess.run(["faketime", "-f", "+10m", sys.executable, "-c", script], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    told = json.loads(done.stdout.strip().splitlines()[-1])
    # Then its own clock is ahead of the server's (the skew is real), while the bulk's times and the
    # clock the ledger tells are the server's
    with psycopg.connect(pg.url) as db:
        server = float(db.execute("SELECT EXTRACT(EPOCH FROM clock_timestamp())").fetchone()[0])
        prepared, published = db.execute("SELECT prepared_at, published_at FROM clock.bulks "
                                          "WHERE bulk_id = 'ahead-1'").fetchone()
    assert told["own"] - server > 500, f"the process's clock was not ahead: {told}, server {server}"
    for what, at in (("the ledger's clock", told["ledger"]), ("prepared_at", prepared), ("published_at", published)):
        assert abs(server - at) < 60, f"{what} {at} is not the server's clock {server} (the process's: {told['own']})"
