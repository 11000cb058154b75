"""The authenticated monitoring endpoint of a real `mqbridge run`: HTTPS with the test certificates
(tests.support.certs), a bearer token read through `${FILE:}`, asked with the real `curl`, by
`mqbridge status` (`--config`, and `--url` with `--cacert` and `--token-file`), and scraped by a
real Prometheus over TLS with the token."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.certs import Certs
from tests.support.configs import BridgeToml
from tests.support.exactly_once import OutputReader, free_port
from tests.support.monitored import running
from tests.support.processes import ROOT, memory_bridge, mqbridge
from tests.support.prometheus import prometheus
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

TOKEN = "integration-token-7f3a9c2e5b1d"


def curl(url: str, *options: str) -> tuple[int, str]:
    """(HTTP status, headers and body) of `curl -i`; status 0 when curl got no answer (its
    error message is the text then)."""
    done = subprocess.run(["curl", "-sS", "-i", "--max-time", "10", "-w", "\n%{http_code}", *options, url],
                          capture_output=True, text=True)
    text, _, code = done.stdout.rpartition("\n")
    return (int(code) if done.returncode == 0 else 0), (text if done.returncode == 0 else done.stderr)


@pytest.fixture
def secured(tmp_path: Path, certs: Certs) -> Iterator[tuple[BridgeToml, Path, str]]:
    """A bridge configuration whose endpoint speaks HTTPS (the server certificate of 127.0.0.1) on
    a free port and asks for the token of `monitoring.token` (0600); a curl header file with it;
    the URL."""
    (tmp_path / "monitoring.token").write_text(TOKEN + "\n")
    (tmp_path / "monitoring.token").chmod(0o600)
    header = tmp_path / "auth.header"
    header.write_text(f"Authorization: Bearer {TOKEN}\n")
    port = free_port()
    toml = memory_bridge("cp").set("monitoring", listen=f"127.0.0.1:{port}", token="${FILE:monitoring.token}",
                                   tls_cert=certs.server.cert, tls_key=certs.server.key, tls_ca=certs.ca)
    yield toml, header, f"https://127.0.0.1:{port}"


def _answering(run: OutputReader, url: str, *options: str) -> None:
    def up() -> bool:
        assert run.proc.poll() is None, run.text()[-5000:]
        return curl(url + "/healthz", *options)[0] != 0  # 401 where it needs the token: an answer
    wait_until(up, 120, f"{url}/healthz to answer")


def test_curl_needs_the_token_except_for_public_metrics_and_mqbridge_status_sends_it(
        tmp_path: Path, certs: Certs, secured: tuple[BridgeToml, Path, str]) -> None:
    # Given a running bridge whose /metrics and /healthz are public
    toml, header, url = secured
    config = toml.set("monitoring", metrics_public=True).write(tmp_path / "bridge.toml")
    ca = ("--cacert", str(certs.ca))
    with running(config) as run:
        _answering(run, url, *ca)
        # When curl asks without the token: 401 and the Bearer challenge for /status and the page
        for path in ("/status", "/", "/nothing"):
            code, text = curl(url + path, *ca)
            assert code == 401 and 'www-authenticate: bearer realm="mqbridge"' in text.lower(), text
        code, text = curl(url + "/status", *ca, "-H", "Authorization: Bearer wrong-token-of-the-same-size")
        assert code == 401 and 'error="invalid_token"' in text
        # Then with it (from a header file: a token on curl's command line would be in `ps`) 200
        code, text = curl(url + "/status", *ca, "-H", f"@{header}")
        assert code == 200 and '"listeners"' in text
        # and /metrics and /healthz answer anyone (Prometheus conventions)
        code, text = curl(url + "/metrics", *ca)
        assert code == 200 and "mqbridge_listener_threads_configured" in text
        assert curl(url + "/healthz", *ca)[0] in (200, 503)
        # and nothing answers plain HTTP, nor a client that does not trust our CA
        assert curl(url.replace("https:", "http:") + "/metrics")[0] == 0
        code, text = curl(url + "/metrics")
        assert code == 0 and "certificate" in text.lower(), text
        code, text = curl(url + "/metrics", "--cacert", str(certs.other_ca))
        assert code == 0 and "certificate" in text.lower(), text
        # and `mqbridge status --config` verifies the server (tls_ca) and sends the token
        status = subprocess.run([sys.executable, "-m", "mqbridge", "status", "--config", str(config)],
                                capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert status.returncode in (0, 1), status.stdout + status.stderr
        assert status.stdout.startswith(f"mqbridge cp at {url}: "), status.stdout
        without = subprocess.run([sys.executable, "-m", "mqbridge", "status", "--url", url],
                                 capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert without.returncode == 3, without.stdout + without.stderr
        # and `mqbridge status --url` does the same without a configuration, given the CA and the
        # token's file
        by_url = subprocess.run([sys.executable, "-m", "mqbridge", "status", "--url", url, *ca,
                                 "--token-file", str(tmp_path / "monitoring.token")],
                                capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert by_url.returncode in (0, 1), by_url.stdout + by_url.stderr
        assert by_url.stdout.startswith(f"mqbridge cp at {url}: "), by_url.stdout
    assert TOKEN not in run.text()
    assert "/status refused: no Authorization header" in run.text()


def test_a_client_ca_requires_a_client_certificate(tmp_path: Path, certs: Certs,
                                                   secured: tuple[BridgeToml, Path, str]) -> None:
    toml, header, url = secured
    config = toml.set("monitoring", tls_client_ca=certs.ca, client_cert=certs.client.cert,
                      client_key=certs.client.key).write(tmp_path / "bridge.toml")
    ca = ("--cacert", str(certs.ca))
    client = ("--cert", str(certs.client.cert), "--key", str(certs.client.key))
    with running(config) as run:
        _answering(run, url, *ca, *client)
        # Without a client certificate the TLS handshake fails; with one signed by another CA too
        assert curl(url + "/metrics", *ca, "-H", f"@{header}")[0] == 0
        assert curl(url + "/metrics", *ca, "--cert", str(certs.expired.cert), "--key", str(certs.expired.key),
                    "-H", f"@{header}")[0] == 0
        # With ours, still the token
        assert curl(url + "/status", *ca, *client)[0] == 401
        assert curl(url + "/status", *ca, *client, "-H", f"@{header}")[0] == 200
        status = subprocess.run([sys.executable, "-m", "mqbridge", "status", "--config", str(config)],
                                capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert status.returncode in (0, 1), status.stdout + status.stderr
    assert "TLS handshake with 127.0.0.1 failed" in run.text()


def test_a_real_prometheus_scrapes_over_tls_with_the_bearer_token(tmp_path: Path, certs: Certs,
                                                                  secured: tuple[BridgeToml, Path, str]) -> None:
    # Given a bridge whose /metrics needs the token too (metrics_public not set)
    toml, _, url = secured
    config = toml.write(tmp_path / "bridge.toml")
    target = url.removeprefix("https://")
    (tmp_path / "wrong.token").write_text("not-the-token-of-this-bridge\n")
    tls = {"ca_file": str(certs.ca)}
    with running(config) as run:
        _answering(run, url, "--cacert", str(certs.ca))
        # When Prometheus scrapes it over TLS with the token, and a second job without the right one
        scrape = {"scheme": "https", "tls_config": tls,
                  "authorization": {"type": "Bearer", "credentials_file": str(tmp_path / "monitoring.token")}}
        wrong = {"job_name": "wrong-token", "scheme": "https", "tls_config": tls,
                 "static_configs": [{"targets": [target]}],
                 "authorization": {"credentials_file": str(tmp_path / "wrong.token")}}
        with prometheus(tmp_path / "prometheus", [target], [], scrape=scrape, other_jobs=[wrong]) as prom:
            # Then the target is up and its series are stored; the other job's is down with a 401
            wait_until(lambda: [t["health"] for t in prom.targets("mqbridge")] == ["up"], 60, "the target up")
            wait_until(lambda: prom.query('mqbridge_listener_threads_configured{job="mqbridge"}'), 30,
                       "a bridge series in Prometheus")
            wait_until(lambda: [t["health"] for t in prom.targets("wrong-token")] == ["down"], 60,
                       "the wrong token's target down")
            [down] = prom.targets("wrong-token")
            assert "401" in down["lastError"], down
        assert run.proc.poll() is None


def test_a_token_in_clear_on_a_public_address_stops_the_start(tmp_path: Path) -> None:
    config = (memory_bridge("cp").set("monitoring", listen=f"0.0.0.0:{free_port()}", token=TOKEN)
              .write(tmp_path / "bridge.toml"))
    out, _ = mqbridge("run", "--config", str(config)).communicate(timeout=120)
    assert "configuration error" in out and "monitoring.token: set without TLS on '0.0.0.0:" in out, out
    assert TOKEN not in out
