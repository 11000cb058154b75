"""A real `mqbridge run --until-idle` whose STOMP source's TLS certificate does not fit: the listener
halts once with the source and the certificate problem, and the run exits 1 — not "no TCP
connection" and reconnecting for ever. (The endpoint is `tests/support/tls_server.py`: the failure
happens in the TLS handshake, before any STOMP frame.)"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support.certs import Certs
from tests.support.processes import mqbridge, stomp_config
from tests.support.tls_server import tls_server

pytestmark = pytest.mark.integration


def test_an_untrusted_broker_certificate_halts_the_listener_and_the_run_exits_1(tmp_path: Path,
                                                                                 certs: Certs) -> None:
    # Given a TLS endpoint whose certificate is signed by a CA the source does not trust
    with tls_server(certs.server) as port:
        config = stomp_config(tmp_path, "/queue/tls.orders", port=port, threads=1,
                              extra_source=f'ssl = true\nca_certs = "{certs.other_ca}"\nconnect_timeout = "3s"')
        # When the bridge runs until idle
        started = time.monotonic()
        proc = mqbridge("run", "--config", str(config), "--until-idle", "3s")
        try:
            out, _ = proc.communicate(timeout=240)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    # Then it exits 1, having halted the listener once with the source and the certificate problem
    assert proc.returncode == 1, f"exit {proc.returncode} after {time.monotonic() - started:.0f}s:\n{out[-4000:]}"
    problem = "the broker's TLS certificate is not accepted: unable to get local issuer certificate"
    halted = [line for line in out.splitlines() if "CRITICAL" in line and ": halted: " in line]
    assert len(halted) == 1 and "source 'amq'" in halted[0] and problem in halted[0], out[-4000:]
    assert "no TCP connection" not in out and "stopped reading" in out, out[-4000:]
