"""MESSAGE frames reach the adapter's queue and stomp.py's heartbeat accounting without stomp.py's
`notify` (`frames.deliver_messages_directly`); every other frame takes stomp.py's own path."""

from __future__ import annotations

import stomp
import stomp.utils

from mqbridge.listeners.stomp.frames import MQBRIDGE_LISTENER, Frames, deliver_messages_directly


def _connection() -> tuple[stomp.Connection12, Frames]:
    conn = stomp.Connection12([("127.0.0.1", 9)], auto_decode=False, heartbeats=(10000, 10000))
    frames = Frames()
    conn.set_listener(MQBRIDGE_LISTENER, frames)
    deliver_messages_directly(conn, frames)
    return conn, frames


def test_a_message_is_queued_once_and_counts_as_a_heartbeat() -> None:
    conn, frames = _connection()
    conn.received_heartbeat = 0.0  # as after CONNECTED with heartbeats: the last time data came
    notified: list[str] = []
    stock_notify = conn.transport.notify
    conn.transport.notify = lambda kind, *args: (notified.append(kind), stock_notify(kind, *args))
    message = stomp.utils.Frame("MESSAGE", {"message-id": "m1", "subscription": "s"}, b"body")
    conn.transport.process_frame(message, b"")
    assert notified == []  # stomp.py's notify (its cost) is skipped for a MESSAGE
    assert frames.frames.get_nowait() is message
    assert frames.frames.empty()
    assert conn.received_heartbeat > 0.0


def test_other_frames_go_through_stomp_py() -> None:
    conn, frames = _connection()
    notified: list[str] = []
    stock_notify = conn.transport.notify
    conn.transport.notify = lambda kind, *args: (notified.append(kind), stock_notify(kind, *args))
    conn.transport.process_frame(stomp.utils.Frame("RECEIPT", {"receipt-id": "r1"}), b"")
    conn.transport.process_frame(stomp.utils.Frame("ERROR", {"message": "refused"}, b""), b"")
    assert frames.wait_for(lambda: frames.errors == [("", "refused")], 0.0)
    assert notified == ["receipt", "error"] and frames.frames.empty()


def test_a_connection_with_other_listeners_keeps_stomp_py_s_path() -> None:
    conn = stomp.Connection12([("127.0.0.1", 9)], auto_decode=False)
    frames, seen = Frames(), []

    class Other(stomp.ConnectionListener):
        def on_message(self, frame: stomp.utils.Frame) -> None:
            seen.append(frame)

    conn.set_listener(MQBRIDGE_LISTENER, frames)
    conn.set_listener("other", Other())
    deliver_messages_directly(conn, frames)
    message = stomp.utils.Frame("MESSAGE", {"message-id": "m1"}, b"body")
    conn.transport.process_frame(message, b"")
    assert seen == [message] and frames.frames.get_nowait() is message
