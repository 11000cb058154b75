"""The STOMP adapter's frame plumbing on stomp.py (`mqbridge.listeners.stomp`): the connection
listener that hands MESSAGE frames to the listener thread and lets it wait, bounded, for CONNECTED,
receipts and ERROR frames (a lost connection ends every wait at once); closing a connection for
sure; reading header values that may not parse."""

from __future__ import annotations

import contextlib
import logging
import queue
import socket
import ssl
import threading
import time
from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from typing import Any

import stomp.utils

from mqbridge.message import utcnow
from mqbridge.put_time import Unit, from_epoch

log = logging.getLogger("mqbridge.listeners.stomp")  # the adapter's logger: one name for its lines

#: stomp.py's own header parser, for the lines that need unescaping.
_stomp_parse_headers: Callable[[Sequence[str], int], dict[str, str]] = stomp.utils.parse_headers
#: Seconds a closing connection waits for the broker to answer DISCONNECT before closing the socket.
DISCONNECT_GRACE = 2.0


#: STOMP 1.2's header escapes but the backslash's own, undone by `str.replace` where a line holds no
#: escaped backslash `\\` (then no escape can overlap another, nor can undoing one make a new one).
_UNESCAPES = (("\\c", ":"), ("\\n", "\n"), ("\\r", "\r"))


def _escape(value: str) -> bytes:
    """A STOMP 1.2 header value, escaped (backslash first) and encoded."""
    return (value.replace("\\", "\\\\").replace("\n", "\\n").replace(":", "\\c")
            .replace("\r", "\\r").encode("utf-8"))


def ack_frames(ids: Sequence[str], transaction: str | None, receipt: str | None = None) -> bytes:
    """The STOMP 1.2 ACK frames of `ids` (in `transaction`, if any; the last one asking for
    `receipt`, if any) as one buffer, for one socket write.

    With `ack_mode = "individual"` a unit's every message is acknowledged (cumulative mode sends one
    ACK). stomp.py sends each frame by its own `sendall`, and each lets go of the GIL: 1,000 ACKs
    cost the listener thread 11–18 ms of CPU and up to 1,000 waits for the GIL, which the collector's
    writer and the other listeners hold meanwhile; one buffer costs about 1.4 ms (ActiveMQ, measured)."""
    tail = b"" if transaction is None else b"transaction:" + _escape(transaction) + b"\n"
    frames = [b"ACK\nid:" + _escape(i) + b"\n" + tail + b"\n\x00" for i in ids]
    if receipt is not None and frames:
        frames[-1] = frames[-1][:-2] + b"receipt:" + _escape(receipt) + b"\n\n\x00"
    return b"".join(frames)


def _unescape(text: str) -> str:
    text = text.replace("\\c", ":")  # the one escape ActiveMQ puts in every frame (its message ids' colons)
    if "\\" in text:
        for escaped, plain in _UNESCAPES[1:]:
            text = text.replace(escaped, plain)
    return text


def parse_headers(lines: Sequence[str], offset: int = 0) -> dict[str, str]:
    """stomp.py's `stomp.utils.parse_headers`, with the same result, faster: stomp.py runs two
    `re.sub` unescapes on every key and value, about 13% of the bridge's Python time at steady
    state (py-spy, bench/throughput.py --mode steady), and ActiveMQ escapes the colons of every
    message id (`\\c`). Escapes are undone with `str.replace` (`_UNESCAPES`); a line holding an
    escaped backslash goes through stomp.py's own function. The first of repeated keys wins, a line
    without a colon or with an empty key is skipped, and an unknown escape is kept, as there."""
    headers: dict[str, str] = {}
    for line in lines[offset:]:
        key, colon, value = line.partition(":")
        if not (colon and key):
            continue
        if "\\" not in line:  # most lines: nothing to undo, and no function call for it
            if key not in headers:
                headers[key] = value
        elif "\\\\" in line:
            for key, value in _stomp_parse_headers([line], 0).items():
                headers.setdefault(key, value)
        else:
            key = _unescape(key)
            if key not in headers:
                headers[key] = _unescape(value)
    return headers


def install_fast_header_parsing() -> None:
    """Make stomp.py parse frames with `parse_headers` (stomp.py's frame parser looks the function
    up in its module at each frame); idempotent."""
    if stomp.utils.parse_headers is _stomp_parse_headers:
        stomp.utils.parse_headers = parse_headers


def deliver_messages_directly(conn: Any, frames: Frames) -> None:
    """Hand `conn`'s MESSAGE frames to `frames` and to stomp.py's heartbeat accounting (a frame
    received counts as a heartbeat) without stomp.py's `notify`; every other frame as before.

    stomp.py notifies each MESSAGE twice ("before_message", "message"), each time sorting its
    listeners under a lock and looking their methods up by name: 9.2 µs a frame against 3.0 µs this
    way (queue included), on the receiver threads that share the GIL with the listeners and the
    write lane. `conn` must have no listener but stomp.py's own and `frames`."""
    transport = conn.transport
    heartbeat = transport.get_listener("protocol-listener")
    stock = transport.process_frame
    if heartbeat is None or set(transport.listeners) != {"protocol-listener", MQBRIDGE_LISTENER}:
        return  # not the listeners this was written for: stomp.py's own path

    def process_frame(frame: Any, frame_str: bytes) -> None:
        if frame.cmd == "MESSAGE":
            frames.on_message(frame)
            heartbeat.on_message(frame)
        else:
            stock(frame, frame_str)

    transport.process_frame = process_frame


#: The name `Frames` is registered under on a stomp.py connection.
MQBRIDGE_LISTENER = "mqbridge"


class Frames:
    """stomp.py listener: MESSAGE frames go to a local queue that the listener thread reads;
    CONNECTED, RECEIPT, ERROR and a lost connection wake whoever waits in `wait_for`."""

    def __init__(self) -> None:
        self.frames: queue.Queue[Any] = queue.Queue()
        self.disconnected = threading.Event()
        self.connected = False
        self.errors: list[tuple[str, str]] = []  # (receipt-id or "", the broker's reason)
        self._receipts: set[str] = set()
        self._changed = threading.Condition()

    def on_message(self, frame: Any) -> None:
        self.frames.put(frame)

    def on_connected(self, frame: Any) -> None:
        with self._changed:
            self.connected = True
            self._changed.notify_all()

    def on_receipt(self, frame: Any) -> None:
        with self._changed:
            self._receipts.add(frame.headers.get("receipt-id", ""))
            self._changed.notify_all()

    def on_error(self, frame: Any) -> None:
        text = error_text(frame)
        with self._changed:
            self.errors.append((frame.headers.get("receipt-id", ""), text))
            self._changed.notify_all()
            connected = self.connected
        # An ERROR answering CONNECT is reported once, by `connect`, naming the source.
        log.log(logging.ERROR if connected else logging.DEBUG, "STOMP ERROR frame: %s", text)

    def on_disconnected(self) -> None:
        self.disconnected.set()
        self.frames.put(None)  # wake a waiting receive
        with self._changed:
            self._changed.notify_all()

    def on_heartbeat_timeout(self) -> None:
        self.on_disconnected()

    def wait_for(self, condition: Callable[[], bool], deadline: float) -> bool:
        """Wait until `condition()` holds (checked whenever a frame or a drop arrives) or
        `deadline` (monotonic) passes; its last value."""
        with self._changed:
            return self._changed.wait_for(condition, timeout=max(0.0, deadline - time.monotonic()))

    def await_receipts(self, receipts: Collection[str], errors_before: int, timeout: float) -> str:
        """Wait for every one of `receipts`; "" once they all came, else why not: an ERROR frame
        arrived (after the first `errors_before`), the connection dropped, or `timeout` passed."""
        wanted = set(receipts)

        def settled() -> bool:
            return (wanted <= self._receipts or len(self.errors) > errors_before
                    or self.disconnected.is_set())

        self.wait_for(settled, time.monotonic() + timeout)
        with self._changed:
            if len(self.errors) > errors_before:
                return "the broker answered with ERROR: " + "; ".join(e for _, e in self.errors[errors_before:])
            if wanted <= self._receipts:
                self._receipts -= wanted
                return ""
        if self.disconnected.is_set():
            return "the connection dropped"
        return f"no receipt within {timeout:g}s"

    def refused(self, sends: Sequence[str], errors_before: int) -> str | None:
        """Which of `sends` (receipt ids, in the order sent) an ERROR after the first
        `errors_before` answered: the one it names (ActiveMQ), else the first without a receipt
        (RabbitMQ names none; a broker answers one connection's frames in order)."""
        with self._changed:
            errors = self.errors[errors_before:]
            named = {rid for rid, _ in errors if rid}
            for rid in sends:
                if rid in named:
                    return rid
            if errors and not named:
                return next((rid for rid in sends if rid not in self._receipts), None)
            return None


def drop(conn: Any, frames: Frames | None = None) -> None:
    """Close a stomp.py connection, whatever state it is in; never raises, never waits long. The
    socket is closed in the end even if the broker does not answer DISCONNECT (stomp.py would keep
    it open, heart-beating, until it does): a broker gives back every unacknowledged message of a
    closed connection, and only of a closed one."""
    try:
        if conn.is_connected():
            conn.disconnect()  # the socket closes when the broker answers DISCONNECT ...
            if frames is not None:
                frames.wait_for(frames.disconnected.is_set, time.monotonic() + DISCONNECT_GRACE)
    except Exception:
        log.debug("disconnecting a STOMP connection failed", exc_info=True)
    finally:
        sock = getattr(conn.transport, "socket", None)
        if isinstance(sock, ssl.SSLSocket):
            # stomp.py ends TLS with a blocking unwrap(), which waits for the broker's close_notify for
            # ever: a broker that went silent would hang this thread. Cut the TCP connection first.
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        try:
            conn.transport.disconnect_socket()  # ... or now
        except Exception:
            log.debug("closing a STOMP socket failed", exc_info=True)


def error_text(frame: Any) -> str:
    """The broker's own reason in an ERROR frame: its `message` header and its body, one line."""
    text = frame.headers.get("message", "")
    body = frame.body.decode("utf-8", "replace") if isinstance(frame.body, bytes) else str(frame.body or "")
    body = one_line(body.strip().split("\n", 1)[0], 300)  # a Java stack trace (ActiveMQ): its first line
    if text and body and text not in body:
        return f"{text}: {body}"
    return body or text or "(no reason given)"


def header_int(headers: dict[str, str], name: str, problems: list[str]) -> int | None:
    """The integer in header `name` (None if absent); an unparseable value adds to `problems`."""
    text = headers.get(name)
    if text is None or text == "":
        return None
    try:
        return int(text)
    except ValueError:
        problems.append(f"header {name}: {one_line(text, 60)!r} is not a number")
        return None


def put_time(headers: dict[str, str], name: str, problems: list[str], *, unit: Unit = "ms") -> datetime | None:
    """The put time in header `name`, a number of the epoch in `unit` (a broker's `timestamp`:
    `mqbridge.put_time.timestamp_unit`; the bridge's own headers: ms), or in the other unit where only
    that reading is a plausible put time (`mqbridge.put_time.from_epoch`); None if absent or not
    positive. An implausible time is returned as read: the listener loop refuses it for the row
    (`mqbridge.put_time.settle`). A value that no unit makes a time adds to `problems`."""
    value = header_int(headers, name, problems)
    if not value or value < 0:
        return None
    put = from_epoch(value, unit, utcnow())
    if put is None:
        problems.append(f"header {name}: {value} {unit} is not a time this bridge can store (past year 9999)")
    return put


def one_line(text: str, limit: int = 1000) -> str:
    """STOMP header values cannot hold newlines (stomp.py escapes them, other clients may not)."""
    return " ".join(text.split())[:limit]
