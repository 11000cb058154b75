"""Stand-ins the STOMP adapter's unit tests share (not a test module)."""

from __future__ import annotations

from types import SimpleNamespace


class StubConnection:
    """What a Transaction's SENDs need of a connection: they are recorded, none is refused."""

    def __init__(self) -> None:
        self.frames = SimpleNamespace(errors=[])
        self.config = SimpleNamespace(broker="activemq")
        self.destination = "/queue/in"
        self.sent: list[str] = []

    def send(self, destination: str, body: bytes, headers: dict[str, str], tx: str | None, what: str) -> str:
        self.sent.append(destination)
        return f"receipt-{len(self.sent)}"
