"""The backlog of STOMP queues (`mqbridge.backlog`): ActiveMQ through its statistics broker plugin,
RabbitMQ through its management API (`listeners.stomp.management`).

ActiveMQ answers a message sent to `ActiveMQ.Statistics.Destination.<queue>` with a reply-to by a
map message holding the queue's `size` (the messages waiting, including those dispatched but not yet
acknowledged) when `<statisticsBrokerPlugin/>` is in the `<plugins>` of its activemq.xml; the map
reaches a STOMP client only when XStream is on the broker's class path (it renders the map as XML).
Each request asks for an end-of-list marker too, so a queue the broker does not know (no message has
ever reached it: depth 0) is told from a broker that does not answer at all (no plugin: unknown).
ActiveMQ does not tell the oldest message's age.

The probe keeps one connection of its own (reconnected when lost), subscribed to a temporary queue
for the answers; never a listener's connection.
"""

from __future__ import annotations

import logging
import queue as queue_module
import time
import uuid
import xml.etree.ElementTree as ElementTree
from collections.abc import Sequence
from typing import Any

from mqbridge.backlog import BacklogProbe, BacklogUnavailable, Reading
from mqbridge.config import SourceConfig, StompSourceConfig
from mqbridge.listeners.stomp.connection import Connection

log = logging.getLogger(__name__)

STATS_PREFIX = "/queue/ActiveMQ.Statistics.Destination."
#: Appended to a statistics request: the broker answers with an empty map after the queue's own.
END_OF_LIST = "ActiveMQ.Statistics.Destination.List.End.With.Null"
HOW_TO_ENABLE = ("ActiveMQ answered no statistics request: add <plugins><statisticsBrokerPlugin/></plugins> to "
                 "the <broker> of activemq.xml, put XStream (Debian: /usr/share/java/xstream.jar, xpp3.jar) in "
                 "the broker's lib directory, and restart the broker (scripts/activemq.sh does both)")


def probe_for(name: str, config: SourceConfig) -> BacklogProbe | None:
    """The backlog probe of a STOMP source: ActiveMQ statistics, RabbitMQ's management API when
    `management_url` is set; None for Artemis (its STOMP has no statistics)."""
    assert isinstance(config, StompSourceConfig)
    if config.broker == "activemq":
        return ActiveMqStatistics(name, config)
    if config.broker == "rabbitmq":
        from mqbridge.listeners.stomp.management import RabbitManagement, how_to_enable

        if config.management_url is None:
            log.info("backlog of source %r is unknown: %s", name, how_to_enable())
            return None
        return RabbitManagement(name, config)
    return None


class ActiveMqStatistics:
    """Reads queue depths from ActiveMQ's statistics plugin over STOMP (see the module docstring)."""

    def __init__(self, name: str, config: StompSourceConfig) -> None:
        self.name, self.config = name, config
        self.reply_to = f"/temp-queue/mqbridge-backlog-{uuid.uuid4().hex[:12]}"
        self._connection: Connection | None = None

    def _connected(self) -> Connection:
        connection = self._connection
        if connection is None or connection.lost:
            if connection is not None:
                connection.close()
            connection = Connection(self.name, self.config, self.reply_to, prefetch=1000,
                                    client_name="mqbridge-backlog")
            connection.open()  # within the source's connect_timeout
            self._connection = connection
        return connection

    def read(self, queues: Sequence[str], timeout: float) -> dict[str, Reading]:
        connection = self._connected()
        asked: dict[str, str] = {}
        for destination in queues:
            correlation = uuid.uuid4().hex
            asked[correlation] = destination
            name = destination.removeprefix("/queue/")
            connection.send(f"{STATS_PREFIX}{name}{END_OF_LIST}", b"",
                            {"reply-to": self.reply_to, "correlation-id": correlation}, None, "statistics request")
        return self._answers(connection, asked, time.monotonic() + timeout)

    def _answers(self, connection: Connection, asked: dict[str, str], deadline: float) -> dict[str, Reading]:
        """Collect the answers until every request has its end-of-list marker, or the deadline."""
        found: dict[str, Reading] = {}
        ended: set[str] = set()
        while len(ended) < len(asked):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or connection.lost:
                break
            try:
                frame = connection.frames.frames.get(timeout=min(remaining, 0.5))
            except queue_module.Empty:
                continue
            if frame is None:
                continue  # the connection dropped: the loop ends on `lost`
            self._ack(connection, frame)
            correlation = frame.headers.get("correlation-id", "")
            if correlation not in asked:
                continue  # an answer to an earlier read that came too late
            entries = _map_entries(frame.body)
            if "size" in entries:
                found[asked[correlation]] = Reading(int(entries["size"]), None, time.monotonic())
            else:
                ended.add(correlation)
        if not ended:
            connection.close()  # nothing answered: start afresh next time
            raise BacklogUnavailable(HOW_TO_ENABLE)
        now = time.monotonic()
        # Ended without a map of its own: the broker has no such queue yet, so nothing waits on it.
        return {asked[c]: found.get(asked[c], Reading(0, None, now)) for c in ended} | found

    @staticmethod
    def _ack(connection: Connection, frame: Any) -> None:
        ack = frame.headers.get("ack") or frame.headers.get("message-id")
        if ack and connection.conn is not None:
            connection.guard(lambda: connection.conn.ack(ack), "ack of a statistics answer")

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def _map_entries(body: bytes) -> dict[str, str]:
    """The entries of a map message as ActiveMQ renders it in XML (XStream: <map><entry><string>key
    </string><long>7</long></entry>...</map>); {} for an empty map or a body that is not one."""
    try:
        root = ElementTree.fromstring(body)
    except ElementTree.ParseError:
        return {}
    entries: dict[str, str] = {}
    for entry in root.iter("entry"):
        children = list(entry)
        if len(children) == 2 and children[0].text is not None:
            entries[children[0].text] = children[1].text or ""
    return entries
