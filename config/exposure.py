"""What the bridge says once at start about secrets it was told to send without TLS: each source or
ledger password, the monitoring token, and S3 keys whose requests go over http://, to a loopback
address or with the section's `allow_plaintext_*` switch."""

from __future__ import annotations

from mqbridge.config.plaintext import all_loopback, conn_name_hosts, is_loopback, ledger_exposure
from mqbridge.config.schema import BridgeConfig
from mqbridge.config.sources import MqSourceConfig, StompSourceConfig
from mqbridge.config.warehouse import ObjectStoreUri, plaintext_s3_host, s3a_endpoint


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
    warehouse = config.spark.warehouse
    bucket = warehouse.bucket if isinstance(warehouse, ObjectStoreUri) else None
    s3_host = plaintext_s3_host(config.spark.conf, bucket) if bucket is not None else None
    if s3_host is not None:
        endpoint, _ = s3a_endpoint(config.spark.conf, bucket)
        notes.append(f"[spark.conf] S3 keys: requests signed with them, and the landed messages, travel without TLS "
                     f"to {endpoint}" + _why(is_loopback(s3_host)))
    monitoring = config.monitoring
    if monitoring.enabled and monitoring.token is not None and not monitoring.tls:
        assert monitoring.host is not None  # enabled
        notes.append(f"[monitoring] token: travels without TLS to {monitoring.listen}"
                     + _why(is_loopback(monitoring.host), "allow_plaintext_token"))
    return notes


def _why(loopback: bool, switch: str = "allow_plaintext_password") -> str:
    return (" (a loopback address: it does not leave this machine)" if loopback
            else f" ({switch} = true)")
