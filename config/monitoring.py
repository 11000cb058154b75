"""`[monitoring]`: where the HTTP endpoint listens, its TLS and who may read it.

With `token` set every path needs `Authorization: Bearer <token>`, except `/metrics` and `/healthz`
when `metrics_public = true` (Prometheus scrape conventions). `tls_cert`/`tls_key` make it HTTPS
(TLS 1.2 or later); `tls_client_ca` also requires a client certificate that CA signed. A token
that would travel in clear to an address other than loopback is refused unless
`allow_plaintext_token = true` (the rule of `allow_plaintext_password`, `config.plaintext`).
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import Field, SecretStr, field_validator, model_validator

from mqbridge.config.base import Model
from mqbridge.config.plaintext import is_loopback
from mqbridge.errors import KeyedError, Loc

_HOSTPORT = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[^\s:\[\]]+):(\d{1,5})")


class MonitoringSection(Model):
    """`[monitoring]`: the HTTP endpoint serving /metrics, /status, /healthz and the status page."""

    listen: str = Field(default="127.0.0.1:9464", description='host:port ([::1]:9464 for IPv6); "" disables')
    token: SecretStr | None = Field(default=None, description="Bearer token every request must send (use "
                                    "${FILE:...} or ${ENV:...}); None: no authentication")
    metrics_public: bool = Field(default=False, description="/metrics and /healthz answer without the token "
                                 "(everything else still needs it)")
    tls_cert: Path | None = Field(default=None, description="Server certificate (PEM, chain first); with "
                                  "tls_key the endpoint speaks HTTPS only")
    tls_key: Path | None = Field(default=None, description="Private key of tls_cert (PEM)")
    tls_client_ca: Path | None = Field(default=None, description="CA (PEM): every client must present a "
                                       "certificate it signed (mutual TLS)")
    tls_ca: Path | None = Field(default=None, description="CA `mqbridge status` verifies the server with; "
                                "None: tls_cert itself (a self-signed certificate)")
    client_cert: Path | None = Field(default=None, description="Certificate `mqbridge status` presents when "
                                     "tls_client_ca is set (PEM)")
    client_key: Path | None = Field(default=None, description="Private key of client_cert (PEM)")
    allow_plaintext_token: bool = Field(default=False, description="Accept a token without TLS on a listen "
                                        "address that is not loopback (it would travel in clear)")

    @field_validator("listen")
    @classmethod
    def _check_listen(cls, value: str) -> str:
        value = value.strip()
        match = _HOSTPORT.fullmatch(value)
        if value and (not match or int(match[2]) > 65535):
            raise ValueError(f'{value!r} is not host:port (e.g. 127.0.0.1:9464, 0.0.0.0:9464, [::1]:9464; '
                             'port 0-65535; "" disables)')
        return value

    @field_validator("token")
    @classmethod
    def _check_token(cls, value: SecretStr | None) -> SecretStr | None:
        text = value.get_secret_value() if value is not None else None
        if text is not None and (len(text) < 16 or text != text.strip() or any(c.isspace() for c in text)):
            raise ValueError("a token is at least 16 characters without spaces (e.g. `openssl rand -hex 32`; "
                             "a ${FILE:...} whose file ends with one newline is fine)")
        return value

    @model_validator(mode="after")
    def _check_tls(self) -> MonitoringSection:
        problems: list[tuple[Loc, str]] = []
        for key, pair in (("tls_cert", "tls_key"), ("tls_key", "tls_cert"), ("client_cert", "client_key"),
                          ("client_key", "client_cert")):
            if getattr(self, key) is not None and getattr(self, pair) is None:
                problems.append(((pair,), f"required with {key}"))
        for key in ("tls_client_ca", "tls_ca", "client_cert"):
            if getattr(self, key) is not None and not self.tls:
                problems.append(((key,), "only used with TLS (tls_cert and tls_key)"))
        if self.metrics_public and self.token is None:
            problems.append((("metrics_public",), "only used with a token (without one every path is public)"))
        if self.token is not None and not self.tls and self.host is not None and not is_loopback(self.host) \
                and not self.allow_plaintext_token:
            problems.append((("token",), f"set without TLS on {self.listen!r}, which is not a loopback address: "
                                         "the token would travel in clear; set tls_cert and tls_key, listen on "
                                         "127.0.0.1, or allow_plaintext_token = true to accept the risk"))
        if problems:
            raise KeyedError(problems)
        return self

    @property
    def enabled(self) -> bool:
        """False when `listen = ""`."""
        return bool(self.listen)

    @property
    def tls(self) -> bool:
        """The endpoint speaks HTTPS (tls_cert and tls_key set)."""
        return self.tls_cert is not None and self.tls_key is not None

    @property
    def host(self) -> str | None:
        """The host to bind (IPv6 without brackets), or None when disabled."""
        return self.listen.rsplit(":", 1)[0].strip("[]") if self.listen else None

    @property
    def port(self) -> int | None:
        """The port to bind (0: any free port), or None when disabled."""
        return int(self.listen.rsplit(":", 1)[1]) if self.listen else None
