"""What the bridge says once at start about secrets it was told to send without TLS: each source or
ledger password, and the monitoring token, that goes in clear to a loopback address or with the
section's `allow_plaintext_*` switch."""

from __future__ import annotations

from mqbridge.config.plaintext import all_loopback, conn_name_hosts, is_loopback, ledger_exposure
from mqbridge.config.schema import BridgeConfig
from mqbridge.config.sources import MqSourceConfig, StompSourceConfig


def plaintext_notes(config: BridgeConfig) -> list[str]:
    """One line for each password of `config` that travels without TLS (to loopback, or allowed
    explicitly): logged once at start. Names the source or the ledger, never the password."""
    notes = []
    for name, source in config.sources.items():
        if isinstance(source, StompSourceConfig) and source.password is not None and not source.ssl:
            notes.append(f"sources.{name}: the STOMP passcode travels without TLS to {source.host}"
                         + _why(is_loopback(source.host)))
        elif isinstance(source, MqSourceConfig) and source.password is not None and not source.cipher_spec:
            notes.append(f"sources.{name}: the MQCSP password travels without TLS to {source.conn_name}"
                         + _why(all_loopback(conn_name_hosts(source.conn_name))))
    if config.ledger.url is not None:
        password, tls, hosts = ledger_exposure(config.ledger.url.get_secret_value())
        if password and not tls and hosts:  # over a Unix-domain socket it never reaches a network
            notes.append(f"[ledger] url: the PostgreSQL password travels without TLS to {', '.join(hosts)}"
                         + _why(all_loopback(hosts)))
    monitoring = config.monitoring
    if monitoring.enabled and monitoring.token is not None and not monitoring.tls:
        assert monitoring.host is not None  # enabled
        notes.append(f"[monitoring] token: travels without TLS to {monitoring.listen}"
                     + _why(is_loopback(monitoring.host), "allow_plaintext_token"))
    return notes


def _why(loopback: bool, switch: str = "allow_plaintext_password") -> str:
    return (" (a loopback address: it does not leave this machine)" if loopback
            else f" ({switch} = true)")
