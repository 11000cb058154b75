"""Who may read the monitoring endpoint: the bearer token check and the TLS contexts of the server
and of `mqbridge status` (`[monitoring]` token, metrics_public, tls_*; `mqbridge.config.monitoring`).

The decision is a pure function (`Access.check`), so that the server only applies it: every path
asks it first, whatever the method, so a state-changing endpoint added later is covered too.
"""

from __future__ import annotations

import hmac
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mqbridge.errors import ConfigError

if TYPE_CHECKING:
    from mqbridge.config import MonitoringSection

#: Paths a Prometheus scrape and a load balancer's health check use, open with `metrics_public`.
PUBLIC_PATHS = frozenset({"/metrics", "/healthz"})
#: `WWW-Authenticate` of a 401 (RFC 6750): no credentials, or ones that do not match.
CHALLENGE = 'Bearer realm="mqbridge"'
INVALID = 'Bearer realm="mqbridge", error="invalid_token"'


@dataclass(frozen=True)
class Denial:
    """A request refused: the `WWW-Authenticate` header of the 401, and why (for the log, never
    with the token)."""

    challenge: str
    reason: str


@dataclass(frozen=True)
class Access:
    """The token every request needs (None: no authentication) and the paths open without it."""

    token: bytes | None = None
    public: frozenset[str] = frozenset()

    @classmethod
    def from_section(cls, section: MonitoringSection) -> Access:
        """The access rule of `[monitoring]`: its token, and /metrics and /healthz public with
        `metrics_public`."""
        token = section.token.get_secret_value().encode() if section.token is not None else None
        return cls(token, PUBLIC_PATHS if section.metrics_public else frozenset())

    def check(self, path: str, authorization: str | None) -> Denial | None:
        """None when a request for `path` with this `Authorization` header may be answered."""
        if self.token is None or path in self.public:
            return None
        if not authorization:
            return Denial(CHALLENGE, "no Authorization header")
        scheme, _, credentials = authorization.strip().partition(" ")
        if scheme.lower() != "bearer":
            return Denial(CHALLENGE, f"Authorization scheme {scheme[:20]!r} instead of Bearer")
        # Constant time: how much of a guess matched must not show in the answer's timing.
        if not hmac.compare_digest(credentials.strip().encode(), self.token):
            return Denial(INVALID, "a bearer token that does not match")
        return None


def server_context(section: MonitoringSection, resolve: Callable[[Path], Path]) -> ssl.SSLContext | None:
    """The TLS context of the endpoint (TLS 1.2 or later; a client certificate signed by
    `tls_client_ca` required when set), or None without TLS. ConfigError naming the key when a
    file cannot be used. `resolve` makes configured paths absolute."""
    if not section.tls:
        return None
    assert section.tls_cert is not None and section.tls_key is not None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load(context.load_cert_chain, "tls_cert/tls_key", resolve(section.tls_cert), resolve(section.tls_key))
    if section.tls_client_ca is not None:
        context.verify_mode = ssl.CERT_REQUIRED
        _load(context.load_verify_locations, "tls_client_ca", resolve(section.tls_client_ca))
    return context


def client_context(section: MonitoringSection, resolve: Callable[[Path], Path]) -> ssl.SSLContext | None:
    """The TLS context `mqbridge status` reaches the endpoint with: the server verified against
    `tls_ca` (else `tls_cert`, a self-signed certificate) and its host name; `client_cert` presented.
    None without TLS."""
    if not section.tls:
        return None
    ca = section.tls_ca or section.tls_cert
    assert ca is not None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies the certificate and the host name
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load(context.load_verify_locations, "tls_ca" if section.tls_ca else "tls_cert", resolve(ca))
    if section.client_cert is not None and section.client_key is not None:
        _load(context.load_cert_chain, "client_cert/client_key", resolve(section.client_cert),
              resolve(section.client_key))
    return context


def _load(method: Callable[..., None], keys: str, *paths: Path) -> None:
    try:
        method(*(str(path) for path in paths))
    except (OSError, ssl.SSLError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror and not isinstance(exc, ssl.SSLError) \
            else str(exc)
        raise ConfigError(f"[monitoring] {keys}: cannot use {', '.join(map(str, paths))}: {why}") from exc
