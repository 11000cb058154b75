"""A TCP proxy on loopback whose connections a test can cut, to simulate a network failure
between the bridge and a real broker (the broker itself keeps running)."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable


class TcpProxy:
    def __init__(self, target: tuple[str, int], listen: str = "127.0.0.1") -> None:
        """Forwards connections to `target` from a free port of `listen` (`self.port`)."""
        self.target = target
        self._server = socket.create_server((listen, 0))
        self.port = self._server.getsockname()[1]
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        self._closed = False
        self.accepted = 0
        # A trap on the client-to-broker stream: (pattern, occurrences to let pass, forward the hit)
        self._trap: tuple[bytes, int, bool] | None = None
        self.trapped = threading.Event()
        threading.Thread(target=self._accept, name="tcpproxy-accept", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._pairs.append((client, upstream))
                self.accepted += 1
            for a, b, up in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(target=self._pump, args=(a, b, up), name="tcpproxy-pump", daemon=True).start()

    def cut_at(self, pattern: bytes, *, skip: int = 0, forward: bool) -> None:
        """Cut every connection when the client sends `pattern` for the (skip+1)-th time: with
        `forward` the data reaches the broker first (it acts, the client never hears back), else
        the data carrying it is dropped (the broker never sees it)."""
        with self._lock:
            self._trap = (pattern, skip, forward)
            self.trapped.clear()

    def _sprung(self, data: bytes) -> bool | None:
        """None if the trap does not fire on `data`, else whether to forward it."""
        with self._lock:
            if self._trap is None or self._trap[0] not in data:
                return None
            pattern, skip, forward = self._trap
            if skip > 0:
                self._trap = (pattern, skip - 1, forward)
                return None
            self._trap = None
            return forward

    def _watcher(self) -> Callable[[bytes], None] | None:
        """What sees each connection's client-to-broker bytes before they are forwarded (None:
        nothing): a subclass that records what a client sends returns one per connection."""
        return None

    def _pump(self, src: socket.socket, dst: socket.socket, up: bool) -> None:
        """Copy src to dst; `up`: the client-to-broker direction, where the trap (and the watcher) is."""
        watch = self._watcher() if up else None
        try:
            while data := src.recv(65536):
                if watch is not None:
                    watch(data)
                forward = self._sprung(data) if up else None
                if forward is not None:
                    if forward:
                        dst.sendall(data)
                    self.cut()
                    self.trapped.set()
                    return
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> int:
        """Reset every open connection; returns how many were cut."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for a, b in pairs:
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
        return len(pairs)

    def close(self) -> None:
        self._closed = True
        self._server.close()
        self.cut()
