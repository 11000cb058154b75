"""Who may read the monitoring endpoint: the token rule, and the server and `mqbridge status` over
TLS with test certificates (tests.support.certs), on a real socket without a broker."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mqbridge.cli import main
from mqbridge.config import parse_config
from mqbridge.errors import ConfigError
from mqbridge.monitoring.access import CHALLENGE, INVALID, Access
from mqbridge.monitoring.server import MonitoringServer
from mqbridge.monitoring.status_client import Credentials, run_status, url_from_config
from tests.support.certs import Certs
from tests.support.configs import orders_config
from tests.support.http import fetch

TOKEN = "0123456789abcdef-monitoring"


def test_without_a_token_every_path_is_open() -> None:
    assert Access().check("/status", None) is None


@pytest.mark.parametrize(("header", "challenge"), [
    (None, CHALLENGE), ("", CHALLENGE), (f"Basic {TOKEN}", CHALLENGE), ("Bearer", INVALID),
    ("Bearer wrong", INVALID), (f"Bearer {TOKEN}x", INVALID), (f"Bearer {TOKEN[:-1]}", INVALID),
])
def test_a_missing_or_wrong_token_is_refused_with_a_bearer_challenge(header: str | None, challenge: str) -> None:
    denial = Access(TOKEN.encode()).check("/status", header)
    assert denial is not None and denial.challenge == challenge
    assert TOKEN not in denial.reason


def test_the_right_token_passes_and_metrics_public_opens_only_metrics_and_healthz() -> None:
    access = Access(TOKEN.encode(), frozenset({"/metrics", "/healthz"}))
    assert access.check("/status", f"Bearer {TOKEN}") is None
    assert access.check("/status", f"bearer  {TOKEN} ") is None  # scheme case-insensitive (RFC 7235)
    assert access.check("/metrics", None) is None and access.check("/healthz", None) is None
    for path in ("/", "/status", "/nothing", "/metrics/../status"):
        assert access.check(path, None) is not None


def _config(tmp_path: Path, certs: Certs, extra: str = "") -> str:
    return orders_config(f'[monitoring]\nlisten = "127.0.0.1:0"\ntoken = "{TOKEN}"\n'
                         f'tls_cert = "{certs.server.cert}"\ntls_key = "{certs.server.key}"\n'
                         f'tls_ca = "{certs.ca}"\n{extra}', "backout_threshold = 0")


@pytest.fixture
def tls_server(tmp_path: Path, certs: Certs) -> Iterator[Callable[[str], MonitoringServer]]:
    from mqbridge.app import build_app

    started: list[MonitoringServer] = []

    def start(extra: str = "") -> MonitoringServer:
        cfg = parse_config(_config(tmp_path, certs, extra), str(tmp_path / "b.toml"))
        monitor = build_app(cfg, executors={}).monitor
        assert monitor is not None
        monitor.start()
        started.append(monitor)
        return monitor

    yield start
    for monitor in started:
        monitor.stop()


def _trusting(certs: Certs, client: bool = False) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(certs.ca))
    if client:
        context.load_cert_chain(str(certs.client.cert), str(certs.client.key))
    return context


def test_the_server_speaks_tls_and_asks_for_the_token(tls_server: Callable[[str], MonitoringServer],
                                                      certs: Certs) -> None:
    server = tls_server("")
    assert server.url == f"https://127.0.0.1:{server.port}"
    trusting = _trusting(certs)
    # Without the token: 401 and the challenge; with it: the status
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(server.url + "/status", context=trusting, timeout=10)
    assert refused.value.code == 401 and refused.value.headers["WWW-Authenticate"] == CHALLENGE
    assert fetch(server.url + "/metrics", context=trusting)[0] == 401  # not public unless configured
    assert fetch(server.url + "/status", context=trusting, token=TOKEN)[0] == 200
    # Plain HTTP gets no answer, and a client that does not trust our CA none either
    assert fetch(server.url.replace("https", "http") + "/metrics")[0] == 0
    assert fetch(server.url + "/status", token=TOKEN, context=ssl.create_default_context())[0] == 0
    assert server.tls is not None and server.tls.minimum_version == ssl.TLSVersion.TLSv1_2


def test_mqbridge_status_sends_the_token_and_verifies_the_server(tls_server: Callable[[str], MonitoringServer],
                                                                 certs: Certs, tmp_path: Path) -> None:
    server = tls_server("metrics_public = true")
    cfg = parse_config(_config(tmp_path, certs, "metrics_public = true"), str(tmp_path / "b.toml"))
    fixed = parse_config(_config(tmp_path, certs).replace("127.0.0.1:0", "0.0.0.0:9464"))
    assert url_from_config(fixed) == "https://127.0.0.1:9464"
    assert fetch(server.url + "/metrics", context=_trusting(certs))[0] == 200
    code, text = run_status(server.url, credentials=Credentials.from_config(cfg))
    assert code == 1 and text.startswith(f"mqbridge mqbridge at {server.url}: UNHEALTHY"), text
    code, text = run_status(server.url, credentials=Credentials(context=_trusting(certs)))
    assert code == 3 and "answered 401: the endpoint needs its token" in text
    code, text = run_status(server.url, credentials=Credentials("x" * 20, _trusting(certs)))
    assert code == 3 and "answered 401: the token was refused" in text
    code, text = run_status(server.url.replace("127.0.0.1", "localhost"), credentials=Credentials(TOKEN))
    assert code == 3 and "CERTIFICATE_VERIFY_FAILED" in text
    # A token is never sent in clear off this machine
    code, text = run_status("http://192.0.2.1:9464", credentials=Credentials(TOKEN))
    assert code == 3 and "the token would travel in clear to 192.0.2.1" in text


def test_a_client_ca_requires_a_client_certificate(tls_server: Callable[[str], MonitoringServer],
                                                   certs: Certs, tmp_path: Path) -> None:
    extra = f'tls_client_ca = "{certs.ca}"\nclient_cert = "{certs.client.cert}"\nclient_key = "{certs.client.key}"'
    server = tls_server(extra)
    assert fetch(server.url + "/status", token=TOKEN, context=_trusting(certs))[0] == 0
    assert fetch(server.url + "/status", token=TOKEN, context=_trusting(certs, client=True))[0] == 200
    cfg = parse_config(_config(tmp_path, certs, extra), str(tmp_path / "b.toml"))
    assert run_status(server.url, credentials=Credentials.from_config(cfg))[0] == 1  # answered: unhealthy


def test_unusable_tls_files_are_a_configuration_error_naming_the_key(tmp_path: Path, certs: Certs) -> None:
    from mqbridge.app import build_app

    text = _config(tmp_path, certs).replace(str(certs.server.key), str(certs.client.key))
    with pytest.raises(ConfigError, match=r"\[monitoring\] tls_cert/tls_key: cannot use"):
        build_app(parse_config(text, str(tmp_path / "b.toml")), executors={})
    text = _config(tmp_path, certs, f'tls_client_ca = "{tmp_path / "missing.pem"}"')
    with pytest.raises(ConfigError, match=r"\[monitoring\] tls_client_ca: cannot use .*missing.pem"):
        build_app(parse_config(text, str(tmp_path / "b.toml")), executors={})


# -- mqbridge status --url with --cacert and --token-file --------------------------------------
def _status(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """Exit code and output (stdout, then stderr) of `mqbridge status ARGS`."""
    code = main(["status", *args])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_status_url_verifies_the_server_against_cacert_and_sends_the_token_of_token_file(
        tls_server: Callable[[str], MonitoringServer], certs: Certs, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    server = tls_server("")
    token_file, wrong = tmp_path / "monitoring.token", tmp_path / "wrong.token"
    token_file.write_text(TOKEN + "\n")
    wrong.write_text("y" * 20 + "\n")
    # With the CA and the token it reads the status (unhealthy: no listener runs)
    code, text = _status(capsys, "--url", server.url, "--cacert", str(certs.ca), "--token-file", str(token_file))
    assert code == 1 and text.startswith(f"mqbridge mqbridge at {server.url}: UNHEALTHY"), text
    # A CA that did not sign the server's certificate, or the system's CAs: no answer it trusts
    for cacert in (("--cacert", str(certs.other_ca)), ()):
        code, text = _status(capsys, "--url", server.url, *cacert, "--token-file", str(token_file))
        assert code == 3 and "CERTIFICATE_VERIFY_FAILED" in text, text
    # Without the token, or with another one: refused, and told where the token goes
    code, text = _status(capsys, "--url", server.url, "--cacert", str(certs.ca))
    assert code == 3 and "answered 401: the endpoint needs its token (--token-file" in text, text
    code, text = _status(capsys, "--url", server.url, "--cacert", str(certs.ca), "--token-file", str(wrong))
    assert code == 3 and "answered 401: the token was refused" in text, text
    assert TOKEN not in text


@pytest.mark.parametrize(("content", "said"), [
    (None, "cannot read it: No such file or directory"), ("", "expected the token alone on one line"),
    ("two words\n", "expected the token alone on one line"), ("a\nb\n", "expected the token alone on one line")],
    ids=["missing", "empty", "two-words", "two-lines"])
def test_an_unusable_token_file_is_a_usage_error_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           content: str | None, said: str) -> None:
    token_file = tmp_path / "monitoring.token"
    if content is not None:
        token_file.write_text(content)
    code, text = _status(capsys, "--url", "https://127.0.0.1:1", "--token-file", str(token_file))
    assert code == 2 and f"configuration error: --token-file {token_file}: {said}" in text, text


def test_an_unusable_cacert_and_options_that_do_not_fit_are_usage_errors(
        tmp_path: Path, certs: Certs, capsys: pytest.CaptureFixture[str]) -> None:
    not_pem = tmp_path / "ca.pem"
    not_pem.write_text("not a certificate\n")
    code, text = _status(capsys, "--url", "https://127.0.0.1:1", "--cacert", str(not_pem))
    assert code == 2 and f"configuration error: --cacert {not_pem}: cannot use it:" in text, text
    code, text = _status(capsys, "--url", "http://127.0.0.1:1", "--cacert", str(certs.ca))
    assert code == 2 and "--cacert is for an https:// endpoint, not http://127.0.0.1:1" in text, text
    code, text = _status(capsys, "--cacert", str(certs.ca))  # the default URL is plain HTTP
    assert code == 2 and "not http://127.0.0.1:9464" in text, text
    config = tmp_path / "b.toml"
    config.write_text(_config(tmp_path, certs))
    code, text = _status(capsys, "--config", str(config), "--token-file", str(not_pem))
    assert code == 2 and "--cacert and --token-file are for a --url without --config" in text, text
