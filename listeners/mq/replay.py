"""A replay's target on IBM MQ: each batch of rows is one unit of work — the rows MQPUT1 under
syncpoint to the destination queue and a marker MQPUT1 to the source's `replay_marker_queue`
(default MQBRIDGE.REPLAY.MARKERS, a local queue the operator defines once), then MQCMIT. The queue
manager makes the rows and the marker visible together or not at all (a unit of work left open by
a killed process is backed out), so after a kill the marker says whether the batch was sent.

A marker's CorrelId names its batch (the batch id's 16 bytes, then 8 bytes of the replay id's
digest), so one marker queue serves every replay: `committed` browses for a batch's marker by
CorrelId, `release` gets the markers of batches the ledger has marked sent. A committed MQPUT is
visible at once on its queue manager, so unlike STOMP no wait is needed: `in_doubt_wait` is unused
and a batch in doubt is decided exactly — each row is sent once across kills.

A row keeps what MQ knew of it: the body byte-exact, MsgId and CorrelId (when the row came from IBM
MQ: 48 hex digits), Format, CodedCharSetId, Encoding, Priority; its other headers become string
message properties (characters MQ does not allow in a property name, such as `-`, become `_`), with
`mqbridge_replay_id`, `mqbridge_replay_key`, `mqbridge_replayed_message_id` and
`mqbridge_replayed_put_timestamp`. A row that keeps its MsgId is one the ledger of a bridge reading
that queue with `identity = "msg_id"` recognises as landed.

The destination is opened for output once when the target is built: a queue the queue manager does
not know (2085) is refused there, before anything is sent or recorded. With `--new-identity`
(`renewal`) a row does not keep its MsgId (the queue manager gives a new one; the old one is in
`mqbridge_replayed_message_id`) and the properties that are a reading bridge's identity get new
values, the old ones kept in `mqbridge_replayed_NAME` (`mqbridge.resend.replay.identities`).
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Sequence
from typing import Any

from mqbridge import failpoints
from mqbridge.config import MqSourceConfig, SourceConfig
from mqbridge.errors import ConfigError, SourceError
from mqbridge.listeners.mq.connect import connect_options, connect_qmgr
from mqbridge.listeners.mq.driver import MQRC_NO_MSG_AVAILABLE, driver_errors, load_driver, reason_of
from mqbridge.listeners.mq.mapping import MQMD_PREFIX
from mqbridge.listeners.mq.poison import SyncpointPutter
from mqbridge.resend.replay.identities import AS_LANDED, REPLAYED_PREFIX, Delivered, Renewal, renew_headers
from mqbridge.resend.replay.rows import ReplayRow, provenance

log = logging.getLogger(__name__)

#: MQMD fields a row's `MQMD.<name>` headers set on the replayed message (numbers).
_MD_NUMBERS = ("CodedCharSetId", "Encoding", "Priority")
_HEX_ID = re.compile(r"[0-9a-f]{48}")
_NOT_PROPERTY_CHARS = re.compile(r"[^A-Za-z0-9_.]")
_MQRC_UNKNOWN_OBJECT_NAME = 2085


def marker_correl_id(replay_id: str, batch_id: str) -> bytes:
    """The CorrelId of a batch's marker: the batch id (a uuid's 16 bytes) and 8 bytes of the replay id's digest."""
    return bytes.fromhex(batch_id)[:16].ljust(16, b"\0") + hashlib.sha256(replay_id.encode()).digest()[:8]


def property_name(header: str) -> str:
    """A header's name as an MQ message property name (letters, digits, `_` and `.`)."""
    name = _NOT_PROPERTY_CHARS.sub("_", header)
    return name if name[:1].isalpha() else f"x_{name}"


def replay_properties(row: ReplayRow, replay_id: str, renewal: Renewal = AS_LANDED) -> dict[str, str]:
    """The properties a row is put with: its headers that are not MQMD fields, where it comes from,
    and the properties of `renewal` with new values."""
    found = {property_name(k): v for k, v in row.headers.items() if not k.startswith(MQMD_PREFIX)}
    found.update(provenance(row, replay_id, "_"))
    renew_headers(found, [(name, property_name(REPLAYED_PREFIX + name)) for name in sorted(renewal.headers)],
                  replay_id, row.key)
    return found


class MqReplayTarget:
    """An IBM MQ queue a replay puts to (module docstring)."""

    guarantee = ("each row is sent once across kills: one unit of work per batch with a marker on the marker queue, "
                 "which says after a kill whether the batch committed")

    def __init__(self, source_name: str, config: SourceConfig, destination: str, replay_id: str,
                 in_doubt_wait: float, *, renewal: Renewal = AS_LANDED, driver: Any = None) -> None:
        assert isinstance(config, MqSourceConfig), "the mq driver's replay"
        del in_doubt_wait  # a committed put is visible at once (module docstring)
        self.destination = destination
        self.replay_id = replay_id
        self.renewal = renewal
        self.notes: list[str] = []  # nothing to say about an IBM MQ queue that exists
        self._driver = driver = driver or load_driver()
        self._c = driver.CMQC
        self._errors = driver_errors(driver)
        self._config = config
        self._qmgr = connect_qmgr(driver, self._errors, config, connect_options(self._c, config.reconnect))
        self._putter = SyncpointPutter(driver, self._errors, queue=destination, qmgr_name=config.queue_manager,
                                       appl_name="mqbridge-replay")
        self._check_destination(source_name)
        self._markers_queue = self._open_markers(source_name)
        self._sent: set[str] = set()  # batches whose markers this run may remove (marked sent, or to be)

    def delivered(self, row: ReplayRow) -> Delivered:
        """The row's properties as put, and its MsgId when it keeps it (`_keeps_msg_id`)."""
        return Delivered(replay_properties(row, self.replay_id, self.renewal),
                         row.msg_id if self._keeps_msg_id(row) else None)

    def _keeps_msg_id(self, row: ReplayRow) -> bool:
        """A row that came from IBM MQ keeps its MsgId, unless `--new-identity` renews it."""
        return bool(_HEX_ID.fullmatch(row.msg_id)) and not self.renewal.msg_id

    def committed(self, batch_ids: Sequence[str]) -> set[str]:
        """Which of these batches have a marker on the marker queue (browsed by CorrelId)."""
        found = {b for b in batch_ids if self._marker(b, browse=True)}
        self._sent |= found
        return found

    def send(self, batch_id: str, rows: Sequence[ReplayRow]) -> None:
        """One unit of work: the rows, the batch's marker, MQCMIT (module docstring)."""
        try:
            for row in rows:
                self._put_row(row)
            marker = self._driver.MD(Format=self._c.MQFMT_STRING, Persistence=self._c.MQPER_PERSISTENT,
                                     CorrelId=marker_correl_id(self.replay_id, batch_id))
            problem = self._putter._put1(self._qmgr, self._config.replay_marker_queue,
                                         f"{self.replay_id} {batch_id}".encode(), marker, None,
                                         f"the marker of batch {batch_id}", new_msg_id=True)
            if problem is not None:
                raise SourceError(f"replay: MQPUT1 of the marker to {self._config.replay_marker_queue} failed: "
                                  f"{problem}; the batch is backed out (nothing of it sent)")
            failpoints.hit("replay_before_commit")
            self._qmgr.commit()
        except BaseException:
            self._qmgr.backout()  # before any disconnect: MQDISC would commit an open unit of work
            raise
        self._sent.add(batch_id)

    def release(self) -> None:
        """Get (remove) the markers of batches the ledger has marked sent (`replay` calls this only then)."""
        for batch_id in sorted(self._sent):
            self._marker(batch_id, browse=False)
        self._sent.clear()

    def close(self) -> None:
        """Close the marker queue and disconnect (no unit of work is open here)."""
        try:
            self._markers_queue.close()
        finally:
            self._qmgr.disconnect()

    def _check_destination(self, source_name: str) -> None:
        """Open the destination for output and close it: a queue the queue manager does not know is
        refused here (ConfigError), before anything is sent or recorded."""
        c, name = self._c, self.destination
        self._open(name, c.MQOO_OUTPUT | c.MQOO_FAIL_IF_QUIESCING,
                   missing=f"--to {name}: no such queue on {self._config.queue_manager} (source {source_name!r}; "
                           "MQRC 2085 UNKNOWN_OBJECT_NAME): define it or name another. Nothing was sent.",
                   failed=f"replay: MQOPEN of {name} for output failed: {{}}. Nothing was sent.").close()

    def _open_markers(self, source_name: str) -> Any:
        c, name = self._c, self._config.replay_marker_queue
        return self._open(name, c.MQOO_INPUT_AS_Q_DEF | c.MQOO_BROWSE | c.MQOO_FAIL_IF_QUIESCING,
                          missing=f"source {source_name!r}: the replay marker queue {name} does not exist on "
                                  f"{self._config.queue_manager}; define it once (DEFINE QLOCAL({name}) "
                                  "DEFPSIST(YES)) or set the source's replay_marker_queue",
                          failed=f"replay: MQOPEN of the marker queue {name} failed: {{}}")

    def _open(self, name: str, options: int, *, missing: str, failed: str) -> Any:
        """MQOPEN `name` with `options`; on failure disconnect first, then raise ConfigError(`missing`)
        for a queue the queue manager does not know (2085), else SourceError(`failed` with the error)."""
        try:
            return self._driver.Queue(self._qmgr, name.encode(), options)
        except self._errors as exc:
            self._qmgr.disconnect()
            if reason_of(exc) == _MQRC_UNKNOWN_OBJECT_NAME:
                raise ConfigError(missing) from exc
            raise SourceError(failed.format(exc)) from exc

    def _marker(self, batch_id: str, *, browse: bool) -> bool:
        """Browse (or get) the marker of `batch_id`; whether it was there."""
        c = self._c
        md = self._driver.MD(CorrelId=marker_correl_id(self.replay_id, batch_id))
        gmo = self._driver.GMO(Options=(c.MQGMO_BROWSE_FIRST if browse else c.MQGMO_NO_SYNCPOINT)
                               | c.MQGMO_NO_WAIT | c.MQGMO_FAIL_IF_QUIESCING, MatchOptions=c.MQMO_MATCH_CORREL_ID,
                               Version=c.MQGMO_VERSION_4)
        try:
            self._markers_queue.get(None, md, gmo)
        except self._errors as exc:
            if reason_of(exc) == MQRC_NO_MSG_AVAILABLE:
                return False
            raise SourceError(f"replay: MQGET of the marker of batch {batch_id} from "
                              f"{self._config.replay_marker_queue} failed: {exc}") from exc
        return True

    def _put_row(self, row: ReplayRow) -> None:
        c = self._c
        md = self._driver.MD(Persistence=c.MQPER_PERSISTENT, MsgType=c.MQMT_DATAGRAM)
        keep_id = self._keeps_msg_id(row)
        if keep_id:
            md.MsgId = bytes.fromhex(row.msg_id)
        if row.correlation_id and _HEX_ID.fullmatch(row.correlation_id):
            md.CorrelId = bytes.fromhex(row.correlation_id)
        md.Format = row.headers.get(MQMD_PREFIX + "Format", "").encode()[:8].ljust(8)  # blank: MQFMT_NONE
        for name in _MD_NUMBERS:
            value = row.headers.get(MQMD_PREFIX + name, "")
            if value.lstrip("-").isdigit():
                setattr(md, name, int(value))
        handle = self._driver.MessageHandle(self._qmgr)
        try:
            for name, value in replay_properties(row, self.replay_id, self.renewal).items():
                handle.properties.set(name.encode(), value)
            problem = self._putter._put1(self._qmgr, self.destination, row.body, md, handle,
                                         f"row {row.key}", new_msg_id=not keep_id)
        finally:
            handle.dlt()
        if problem is not None:
            raise SourceError(f"replay: MQPUT1 of row {row.key} to {self.destination} failed: {problem}; the batch "
                              "is backed out (nothing of it sent)")
