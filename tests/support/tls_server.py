"""A TLS endpoint for tests of TLS failures at connect: it completes handshakes with the certificate
it is given (of `tests/support/certs.py`) and then says nothing, so every failure it provokes is the
TLS layer's own."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

from tests.support.certs import KeyPair


@contextlib.contextmanager
def tls_server(pair: KeyPair, client_ca: Path | None = None) -> Iterator[int]:
    """A TLS endpoint on 127.0.0.1 serving `pair` (requiring a client certificate signed by `client_ca`
    when given) that completes handshakes and then says nothing; its port."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(pair.cert), str(pair.key))
    if client_ca is not None:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(str(client_ca))
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()
    open_connections: list[socket.socket] = []

    def serve() -> None:
        while not stop.is_set():
            try:
                raw, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            raw.settimeout(5)
            try:
                open_connections.append(context.wrap_socket(raw, server_side=True))
            except (ssl.SSLError, OSError):
                raw.close()  # the client refused us, or we refused the client: what is under test

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        listener.close()
        for conn in open_connections:
            conn.close()
