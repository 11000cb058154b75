"""Source models: `[sources.<name>]` tables, told apart by their `kind` key."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, SecretStr, field_validator, model_validator

from mqbridge.config.base import Duration, Model, Size, parse_duration
from mqbridge.config.plaintext import all_loopback, conn_name_hosts, is_loopback
from mqbridge.errors import KeyedError

#: "host:1414": one colon (an IPv6 address has several) before digits.
_HOST_COLON_PORT = re.compile(r"[^\s:(),]+:\d{1,5}")
#: A host name or address as stomp.py connects to it: no scheme, port or spaces.
_HOST = re.compile(r"\[?[0-9A-Fa-f:.]+\]?|[A-Za-z0-9_.-]+")


#: Why `commit_mode = "transactional"` is refused on RabbitMQ.
RABBITMQ_NOT_TRANSACTIONAL = (
    "RabbitMQ does not apply a STOMP transaction atomically (measured on 3.10: it answers COMMIT, then applies "
    "the frames one by one, and a SEND the queue or the broker refuses stops neither the frames before it nor the "
    "ACK after it), so a move, result or derived message it refused would be lost; remove the key (RabbitMQ: "
    '"receipted", every SEND confirmed by its receipt before any ACK)')


class StompSourceConfig(Model):
    """`[sources.<name>]` with kind = "stomp": a STOMP broker (ActiveMQ, RabbitMQ, Artemis)."""

    kind: Literal["stomp"] = Field(default="stomp", description="Source kind")
    host: str = Field(default="127.0.0.1", min_length=1, description="Broker host")
    port: int = Field(default=61613, ge=1, le=65535, description="Broker STOMP port")
    user: str | None = Field(default=None, description="Login")
    password: SecretStr | None = Field(default=None, description="Passcode (use ${ENV:...} or ${FILE:...})")
    broker: Literal["activemq", "rabbitmq", "artemis"] = Field(default="activemq", description="STOMP dialect")
    vhost: str | None = Field(default=None, description='STOMP host header (virtual host); default: "/" with '
                                                         'broker = "rabbitmq", else host')
    heartbeat: Duration = Field(default=parse_duration("10s"), description="Heart-beat period; 0 disables")
    ack_mode: Literal["cumulative", "individual"] | None = Field(
        default=None,
        description="cumulative: one ACK per unit of work (STOMP ack=client); "
                    "individual: one ACK per message (ack=client-individual); "
                    'default: individual with broker = "rabbitmq", else cumulative')
    commit_mode: Literal["transactional", "receipted"] | None = Field(
        default=None,
        description='transactional: moves, copies and ACKs in one STOMP transaction; receipted: each move or '
                    'copy confirmed by its receipt, then the ACKs (safe where ACKs are not transactional); '
                    'default: receipted with broker = "artemis" or "rabbitmq" (where transactional is refused), '
                    'else transactional')
    connect_timeout: Duration = Field(default=parse_duration("10s"), gt=0,
                                      description="Longest wait for the whole connect (TCP, TLS, CONNECTED, "
                                                  "subscription receipt)")
    receipt_timeout: Duration = Field(default=parse_duration("15s"), gt=0,
                                      description="Longest wait for a receipt (commit, move, ACK); ends at once "
                                                  "when the connection drops")
    max_message_size: Size | None = Field(default=None, gt=0,
                                          description="Bodies larger than this go to the backout queue; "
                                                      "default: no limit")
    allow_plaintext_password: bool = Field(default=False, description="Accept a password without TLS (ssl = false) "
                                           "to a host that is not loopback (127.0.0.0/8, ::1, localhost)")
    ssl: bool = Field(default=False, description="Use TLS")
    ssl_insecure: bool = Field(default=False, description="Allow ssl = true without ca_certs: the broker is then "
                               "verified against every CA the system trusts (host name checked), not one CA named "
                               "here; verification is never turned off")
    ca_certs: Path | None = Field(default=None, description="CA bundle verifying the broker (PEM); required with "
                                  "ssl = true unless ssl_insecure")
    cert_file: Path | None = Field(default=None, description="Client certificate (PEM)")
    key_file: Path | None = Field(default=None, description="Client private key (PEM)")
    management_url: str | None = Field(default=None, pattern=r"^https?://[^/\s@]+/?$",
                                       description='RabbitMQ: its management API ("http://host:15672", no '
                                                   "credentials in it), read with user and password for each "
                                                   "listener's backlog")

    @field_validator("host")
    @classmethod
    def _check_host(cls, value: str) -> str:
        if _HOST.fullmatch(value):
            return value
        if _HOST_COLON_PORT.fullmatch(value):
            host, port = value.rsplit(":", 1)
            raise ValueError(f"{value!r} has a port; write host = {host!r} and port = {port}")
        raise ValueError(f"{value!r} is not a host name or address (no scheme, port or spaces; e.g. "
                         "broker.example.com or 10.0.0.5)")

    @model_validator(mode="after")
    def _check_tls(self) -> StompSourceConfig:
        files = [k for k in ("ca_certs", "cert_file", "key_file") if getattr(self, k) is not None]
        if files and not self.ssl:
            raise KeyedError([(("ssl",), f"{', '.join(files)} set but ssl = false; set ssl = true")])
        if self.ssl and self.ca_certs is None and not self.ssl_insecure:
            raise KeyedError([(("ca_certs",), "ssl = true needs ca_certs, the CA that signed the broker's "
                                              "certificate: without it the broker is verified against every CA "
                                              "the system trusts, any of which could have signed a certificate "
                                              "for its host name (set ssl_insecure = true to accept that)")])
        if self.password is not None and not self.ssl and not self.allow_plaintext_password \
                and not is_loopback(self.host):
            raise KeyedError([(("password",), "set with ssl = false: without TLS the STOMP passcode travels in "
                                              f"clear to host {self.host!r}, which is not a loopback address; set "
                                              "ssl = true (with ca_certs), or allow_plaintext_password = true "
                                              "to accept the risk")])
        if self.management_url is not None:
            _check_management(self)
        if self.vhost is None and self.broker == "rabbitmq":
            self.vhost = "/"  # RabbitMQ's default virtual host; the host name is never a vhost there
        if self.broker == "rabbitmq" and self.commit_mode == "transactional":
            raise KeyedError([(("commit_mode",), RABBITMQ_NOT_TRANSACTIONAL)])
        if self.commit_mode is None:
            # Artemis acknowledges STOMP ACK frames at once, outside any transaction; RabbitMQ does not
            # apply a transaction atomically (RABBITMQ_NOT_TRANSACTIONAL).
            self.commit_mode = "receipted" if self.broker in ("artemis", "rabbitmq") else "transactional"
        if self.ack_mode is None:
            # RabbitMQ gives messages back with NACK, never by SENDing copies (`mqbridge.listeners.stomp`).
            self.ack_mode = "individual" if self.broker == "rabbitmq" else "cumulative"
        return self


def _check_management(cfg: StompSourceConfig) -> None:
    """`management_url` is RabbitMQ's, and without TLS it carries the password only to loopback."""
    if cfg.broker != "rabbitmq":
        raise KeyedError([(("management_url",), 'only for broker = "rabbitmq" (ActiveMQ answers statistics over '
                                                "STOMP; Artemis has none)")])
    host = cfg.management_url.split("://", 1)[1].rstrip("/").rsplit(":", 1)[0].strip("[]") \
        if cfg.management_url else ""
    if cfg.password is not None and cfg.management_url and cfg.management_url.startswith("http://") \
            and not cfg.allow_plaintext_password and not is_loopback(host):
        raise KeyedError([(("management_url",), f"http:// to host {host!r}, which is not a loopback address: the "
                                                "password would travel in clear; use https://, or "
                                                "allow_plaintext_password = true to accept the risk")])


_CONN_NAME = re.compile(r"[^\s(),]+(\(\d{1,5}\))?")
_RECONNECT = ("qmgr", "any", "disabled", "as_def")


def _check_reconnect(value: Any) -> Any:
    if isinstance(value, bool) or (isinstance(value, str) and value.lower() in _RECONNECT):
        return value.lower() if isinstance(value, str) else value
    raise ValueError('must be true, false, "qmgr", "any", "disabled" or "as_def"')


def _check_convert(value: Any) -> Any:
    if isinstance(value, bool) or (isinstance(value, int) and 1 <= value <= 65535):
        return value
    raise ValueError("must be true (convert to UTF-8, CCSID 1208), false, or a CCSID number 1-65535")


class MqSourceConfig(Model):
    """`[sources.<name>]` with kind = "mq": an IBM MQ queue manager over a client channel."""

    kind: Literal["mq"] = Field(default="mq", description="Source kind")
    queue_manager: str = Field(max_length=48, description="Queue manager name")
    channel: str = Field(default="DEV.APP.SVRCONN", min_length=1, max_length=20, description="SVRCONN channel")
    conn_name: str = Field(min_length=1, max_length=264, description='"host(1414)" or a comma list of them')
    user: str | None = Field(default=None, description="MQCSP user id")
    password: SecretStr | None = Field(default=None, description="MQCSP password (use ${ENV:...} or ${FILE:...})")
    cipher_spec: str | None = Field(default=None, description="TLS CipherSpec of the channel, enables TLS")
    key_repository: str | None = Field(default=None, description="Key repository stem (no .kdb)")
    certificate_label: str | None = Field(default=None, description="Client certificate label")
    allow_plaintext_password: bool = Field(default=False, description="Accept a password on a channel without TLS "
                                           "to a conn_name that is not loopback (127.0.0.0/8, ::1, localhost)")
    reconnect: Annotated[bool | Literal["qmgr", "any", "disabled", "as_def"], BeforeValidator(_check_reconnect)] = \
        Field(default=True, description='Client auto-reconnect: true/"any", "qmgr", false/"disabled", "as_def"')
    convert: Annotated[bool | int, BeforeValidator(_check_convert)] = Field(
        default=False, description="MQGMO_CONVERT: true converts text to UTF-8, or a target CCSID")
    wait_interval: Duration = Field(default=parse_duration("1s"), gt=0, description="Longest single MQGET wait")
    replay_marker_queue: str = Field(default="MQBRIDGE.REPLAY.MARKERS", min_length=1, max_length=48,
                                     description="`mqbridge replay` to this queue manager: the local queue holding "
                                                 "each batch's marker (define it once)")

    @field_validator("conn_name")
    @classmethod
    def _check_conn_name(cls, value: str) -> str:
        colon = next((p.strip() for p in value.split(",") if _HOST_COLON_PORT.fullmatch(p.strip())), None)
        if colon is not None:
            # MQ would take "host:1414" for a host name and fail at connect (MQRC 2538).
            host, port = colon.rsplit(":", 1)
            raise ValueError(f"{colon!r} is host:port; IBM MQ writes the port in brackets — write {host}({port})")
        if not all(_CONN_NAME.fullmatch(part.strip()) for part in value.split(",")):
            raise ValueError(f"{value!r} is not host(port) or a comma list of them (e.g. mqhost1(1414),mqhost2(1414))")
        return value

    @model_validator(mode="after")
    def _check_password(self) -> MqSourceConfig:
        if self.user and self.password is None:
            raise KeyedError([(("password",), "required when user is set (MQCSP authenticates a user with a "
                                              "password)")])
        if self.password is not None and not self.cipher_spec and not self.allow_plaintext_password \
                and not all_loopback(conn_name_hosts(self.conn_name)):
            raise KeyedError([(("password",), "set without cipher_spec: without TLS the MQCSP password travels "
                                              f"in clear to conn_name {self.conn_name!r}, which is not only "
                                              "loopback addresses; set cipher_spec and key_repository, or "
                                              "allow_plaintext_password = true to accept the risk")])
        return self


class MemorySourceConfig(Model):
    """`[sources.<name>]` with kind = "memory": a broker inside the process, for tests and demos
    (`mqbridge.listeners.memory`); its messages are lost when the process ends."""

    kind: Literal["memory"] = Field(default="memory", description="Source kind")
    broker: str = Field(default="default", min_length=1, description="Name of the in-process broker")


SourceConfig = Annotated[StompSourceConfig | MqSourceConfig | MemorySourceConfig, Field(discriminator="kind")]
