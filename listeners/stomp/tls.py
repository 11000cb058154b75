"""Why a STOMP connection over TLS failed, when TLS is why.

stomp.py reports any failed connection attempt as a bare `ConnectFailedException` (its own log line
has the socket's error), so a certificate the bridge does not trust looks like a broker that is down,
and the control thread would reconnect forever. After a failed connect with `ssl = true`, `diagnose`
makes one TLS handshake of its own with the settings stomp.py uses (the same CA file, or the system's
CAs without one; verification and host name check on; the client certificate when configured) and
names the certificate problem: the broker's certificate not trusted, expired or for another host; the
client certificate missing or refused; a CA or key file that cannot be read. Each is a configuration
error that reconnecting cannot mend (`SourceTLSError`: the listener halts with the reason).
"""

from __future__ import annotations

import socket
import ssl
from pathlib import Path

#: How long to wait, after the handshake, for the broker to reject the client certificate: with TLS
#: 1.3 a server that requires one sends its alert only after the client considers the handshake done.
ALERT_WAIT = 1.0


def diagnose(host: str, port: int, *, ca_certs: Path | None, cert_file: Path | None, key_file: Path | None,
             timeout: float) -> str | None:
    """The TLS problem with (host, port) for these settings, as one sentence; None when TLS is not
    the problem (no TCP connection, or a handshake that succeeds)."""
    try:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verification and host name check on
        if ca_certs is not None:
            context.load_verify_locations(str(ca_certs))
        else:
            context.load_default_certs()
        if cert_file is not None:
            context.load_cert_chain(str(cert_file), str(key_file) if key_file is not None else None)
    except (OSError, ssl.SSLError) as exc:
        return f"TLS settings cannot be loaded (ca_certs, cert_file, key_file): {exc}"
    try:
        raw = socket.create_connection((host, port), timeout=timeout)
    except OSError:
        return None  # not TLS: the caller's own message (refused, unreachable) stands
    try:
        with context.wrap_socket(raw, server_hostname=host) as tls:
            tls.settimeout(ALERT_WAIT)
            try:
                tls.recv(1)  # a STOMP broker says nothing before CONNECT: a timeout is the good outcome
            except TimeoutError:
                return None
            except ssl.SSLError as exc:
                return f"the broker refused the TLS session: {_reason(exc)}{_client_hint(cert_file)}"
            except OSError:
                return None
            return None
    except ssl.SSLCertVerificationError as exc:
        return f"the broker's TLS certificate is not accepted: {exc.verify_message or _reason(exc)}"
    except ssl.SSLError as exc:
        return f"TLS handshake failed: {_reason(exc)}{_client_hint(cert_file)}"
    except OSError:
        return None
    finally:
        raw.close()


def _reason(exc: ssl.SSLError) -> str:
    return str(exc.reason or exc).replace("_", " ").lower()


def _client_hint(cert_file: Path | None) -> str:
    return (" (the broker may require a client certificate: set cert_file and key_file)"
            if cert_file is None else " (is cert_file signed by a CA the broker trusts?)")
