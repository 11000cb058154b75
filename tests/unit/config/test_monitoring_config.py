"""`[monitoring]` token and TLS keys: validated at load, the token a secret like the passwords."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqbridge.config import BridgeConfig, parse_config, plaintext_notes
from mqbridge.errors import ConfigError
from tests.support.configs import orders_config

TOKEN = "t0ken-of-the-monitoring-endpoint"


def monitoring(text: str) -> BridgeConfig:
    return parse_config(orders_config(f"[monitoring]\n{text}"), env={})


def test_a_token_on_a_public_address_without_tls_is_refused_naming_the_key_and_never_the_token() -> None:
    with pytest.raises(ConfigError) as caught:
        monitoring(f'listen = "0.0.0.0:9464"\ntoken = "{TOKEN}"')
    text = str(caught.value)
    assert "monitoring.token: set without TLS on '0.0.0.0:9464'" in text and "allow_plaintext_token" in text
    assert TOKEN not in text


def test_the_allow_switch_tls_or_loopback_accept_the_token_and_the_start_note_says_why() -> None:
    allowed = parse_config(orders_config(f'[monitoring]\nlisten = "10.1.2.3:9464"\ntoken = "{TOKEN}"\n'
                                         "allow_plaintext_token = true"))
    assert plaintext_notes(allowed) == ["[monitoring] token: travels without TLS to 10.1.2.3:9464 "
                                        "(allow_plaintext_token = true)"]
    loopback = parse_config(orders_config(f'[monitoring]\nlisten = "127.0.0.1:9464"\ntoken = "{TOKEN}"'))
    assert plaintext_notes(loopback) == ["[monitoring] token: travels without TLS to 127.0.0.1:9464 "
                                         "(a loopback address: it does not leave this machine)"]
    tls = parse_config(orders_config(f'[monitoring]\nlisten = "0.0.0.0:9464"\ntoken = "{TOKEN}"\n'
                                     'tls_cert = "s.pem"\ntls_key = "s.key"'))
    assert tls.monitoring.tls and plaintext_notes(tls) == []


def test_the_token_comes_through_a_file_reference_and_is_a_secret(tmp_path: Path) -> None:
    # Given the token in a file ending with a newline (as `openssl rand -hex 32 > file` writes it)
    (tmp_path / "monitoring.token").write_text(TOKEN + "\n")
    cfg = parse_config(orders_config('[monitoring]\ntoken = "${FILE:monitoring.token}"\nmetrics_public = true'),
                       str(tmp_path / "bridge.toml"))
    assert cfg.monitoring.token is not None and cfg.monitoring.token.get_secret_value() == TOKEN
    assert cfg.secrets()["monitoring.token"] == TOKEN  # redacted from logs, kept out of children
    assert TOKEN not in repr(cfg.monitoring) and TOKEN not in cfg.model_dump_json()
    env = parse_config(orders_config('[monitoring]\ntoken = "${ENV:MON_TOKEN}"'), env={"MON_TOKEN": TOKEN})
    assert env.monitoring.token is not None and env.monitoring.token.get_secret_value() == TOKEN


@pytest.mark.parametrize(("text", "message"), [
    ('token = "short"', "monitoring.token: a token is at least 16 characters"),
    ('token = "has a space in the middle"', "monitoring.token: a token is at least 16 characters"),
    ('tls_cert = "s.pem"', "monitoring.tls_key: required with tls_cert"),
    ('tls_key = "s.key"', "monitoring.tls_cert: required with tls_key"),
    ('tls_client_ca = "ca.pem"', "monitoring.tls_client_ca: only used with TLS"),
    ('tls_ca = "ca.pem"', "monitoring.tls_ca: only used with TLS"),
    ('tls_cert = "s.pem"\ntls_key = "s.key"\nclient_cert = "c.pem"',
     "monitoring.client_key: required with client_cert"),
    ("metrics_public = true", "monitoring.metrics_public: only used with a token"),
    ('tls = true', "monitoring.tls: unknown key"),
])
def test_inconsistent_monitoring_keys_are_refused(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        monitoring(text)


def test_without_a_token_the_endpoint_stays_as_it_was() -> None:
    cfg = monitoring('listen = "0.0.0.0:9464"')
    assert cfg.monitoring.token is None and not cfg.monitoring.tls
