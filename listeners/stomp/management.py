"""RabbitMQ's backlog through its management API (`[sources.X] management_url`): one GET of
`/api/queues/<vhost>/<queue>` per listener queue, with the source's user and password, bounded by
the poller's timeout. `messages` is ready plus unacknowledged; `head_message_timestamp` (when the
oldest message carries a timestamp) gives its age. The plugin ships with Debian's rabbitmq-server:
`rabbitmq-plugins enable rabbitmq_management` (port 15672)."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

from mqbridge.backlog import BacklogUnavailable, Reading
from mqbridge.config import StompSourceConfig
from mqbridge.message import utcnow
from mqbridge.put_time import from_epoch, refusal, timestamp_unit

#: STOMP destinations that name one queue, and where its name starts.
_QUEUE_PREFIXES = ("/queue/", "/amq/queue/")


def how_to_enable() -> str:
    return ('set management_url = "http://127.0.0.1:15672" on the source (after `rabbitmq-plugins enable '
            'rabbitmq_management`; the source\'s user needs the "monitoring" or "management" tag)')


class RabbitManagement:
    """Reads queue depths and the oldest message's age from RabbitMQ's management API."""

    def __init__(self, name: str, config: StompSourceConfig) -> None:
        assert config.management_url is not None
        self.name = name
        self.base = config.management_url.rstrip("/")
        self.vhost = config.vhost or "/"
        password = config.password.get_secret_value() if config.password is not None else ""
        token = base64.b64encode(f"{config.user or 'guest'}:{password}".encode()).decode()
        self._headers = {"Authorization": f"Basic {token}", "Accept": "application/json"}

    def read(self, queues: Sequence[str], timeout: float) -> dict[str, Reading]:
        deadline = time.monotonic() + timeout
        found: dict[str, Reading] = {}
        for destination in queues:
            name = next((destination[len(p):] for p in _QUEUE_PREFIXES if destination.startswith(p)), None)
            if name is None:
                continue  # an exchange or topic subscription: no one queue to count
            found[destination] = self._queue(name, max(0.1, deadline - time.monotonic()))
        return found

    def _queue(self, name: str, timeout: float) -> Reading:
        url = f"{self.base}/api/queues/{urllib.parse.quote(self.vhost, safe='')}/{urllib.parse.quote(name, safe='')}"
        request = urllib.request.Request(url, headers=self._headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310 -- http(s) only (config)
                doc: dict[str, Any] = json.load(answer)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return Reading(0, None, time.monotonic())  # not declared yet: nothing waits on it
            if exc.code in (401, 403):
                raise BacklogUnavailable(f"the management API at {self.base} refused the source's user "
                                         f"(HTTP {exc.code}): give it the \"monitoring\" tag") from None
            raise OSError(f"the management API at {self.base} answered HTTP {exc.code}") from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, ConnectionRefusedError):
                raise BacklogUnavailable(f"nothing listens at {self.base}: {how_to_enable()}") from None
            raise OSError(f"the management API at {self.base}: {exc.reason}") from None
        return reading_of(doc)

    def close(self) -> None:
        """Nothing stays open between reads."""


def reading_of(doc: dict[str, Any]) -> Reading:
    """A queue document of the management API as a reading; `messages` is missing until the broker
    has collected the queue's first statistics (then: unknown). `head_message_timestamp` is the
    oldest message's timestamp property in seconds (RabbitMQ's unit), read as the STOMP adapter
    reads the `timestamp` header (`mqbridge.put_time`): a producer's milliseconds are read as such,
    and a time no message can have been put at gives no age (unknown)."""
    now = time.monotonic()
    messages = doc.get("messages")
    return Reading(int(messages) if isinstance(messages, int) else None, head_age(doc.get("head_message_timestamp")),
                   now)


def head_age(head: object) -> float | None:
    """Seconds since the oldest message was put, from `head_message_timestamp`; None if unknown."""
    if not isinstance(head, (int, float)) or isinstance(head, bool) or head <= 0:
        return None
    received = utcnow()
    put = from_epoch(head, timestamp_unit("rabbitmq"), received)
    if put is None or refusal(put, received):
        return None
    return max(0.0, (received - put).total_seconds())
