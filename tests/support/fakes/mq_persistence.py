"""The persistent mode of the fake queue manager (`mq_server.FakeQueueManagerServer`): a snapshot
of the committed state in a state file, written atomically and durably, and a journal of the
messages got under syncpoint since, so that a process killed with SIGKILL leaves what a queue
manager would recover: its open unit of work backed out on the next load."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import pickle
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from tests.support.fakes.mq_model import FakeQueue, StoredMessage

STATE_ENVIRONMENT_VARIABLE = "MQBRIDGE_FAKE_QM_STATE"
_STATE_VERSION = 1
_QUEUE_ATTRIBUTES = tuple(f.name for f in dataclasses.fields(FakeQueue) if f.name not in ("name", "messages"))


class PersistentState:
    """Saving and loading a fake queue manager's state (mixed into `FakeQueueManagerServer`)."""

    name: str
    dead_letter_queue: str
    max_uncommitted: int
    ccsid: int
    events: list[tuple[str, dict[str, Any]]]
    queues: dict[str, FakeQueue]
    cond: threading.Condition
    state_file: Path | None
    recovered: dict[str, int]
    _seq: Iterator[int]
    _msg_ids: Iterator[int]
    _generation: int
    _journal: IO[str] | None
    _persist_paused: int
    # publish/subscribe (`mq_topics.PubSub`, the server's other mixin)
    pubsub_state: Callable[[], dict[str, Any]]
    load_pubsub: Callable[[dict[str, Any]], None]

    # -- persistent mode -----------------------------------------------------------------------
    @property
    def journal_file(self) -> Path | None:
        return None if self.state_file is None else self.state_file.with_name(self.state_file.name + ".uow")

    def save(self) -> None:
        """Write the committed state to the state file, atomically and durably (persistent mode).
        Messages held by an open unit of work are written as held: a later load backs them out."""
        if self.state_file is None:
            return
        with self.cond:
            seq, msg_id = next(self._seq), next(self._msg_ids)
            self._seq, self._msg_ids = itertools.count(seq), itertools.count(msg_id)
            self._generation += 1
            state = {
                "version": _STATE_VERSION, "name": self.name, "generation": self._generation,
                "dead_letter_queue": self.dead_letter_queue, "max_uncommitted": self.max_uncommitted,
                "ccsid": self.ccsid, "pubsub": self.pubsub_state(),
                "seq": seq, "msg_id": msg_id, "events": list(self.events),
                "queues": [{
                    "name": q.name,
                    "attributes": {a: getattr(q, a) for a in _QUEUE_ATTRIBUTES},
                    "messages": [{"data": m.data, "md": dict(m.md), "properties": dict(m.properties), "seq": m.seq,
                                  "held": m.locked_by is not None}
                                 for m in q.messages if m.pending_put_by is None],
                } for q in self.queues.values()],
            }
            path = self.state_file
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            with open(tmp, "wb") as f:
                pickle.dump(state, f, protocol=pickle.HIGHEST_PROTOCOL)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            dir_fd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
            # The snapshot holds every lock the journal recorded: start a new journal. A journal
            # line of an older generation (a kill between the replace and this) is ignored on load.
            if self._journal is not None:
                self._journal.close()
            journal = self.journal_file
            assert journal is not None
            self._journal = open(journal, "w", encoding="ascii")  # noqa: SIM115 - kept open, closed in close()

    def _load(self, name: str | None) -> None:
        assert self.state_file is not None
        with open(self.state_file, "rb") as f:
            state = pickle.load(f)
        if state.get("version") != _STATE_VERSION:
            raise RuntimeError(f"{self.state_file}: unknown fake queue manager state version {state.get('version')}")
        if name and name != state["name"]:
            raise RuntimeError(f"{self.state_file} holds queue manager {state['name']}, not {name}")
        self.name = state["name"]
        self.dead_letter_queue = state["dead_letter_queue"]
        self.max_uncommitted = state["max_uncommitted"]
        self.ccsid = state["ccsid"]
        self._generation = state["generation"]
        self._seq, self._msg_ids = itertools.count(state["seq"]), itertools.count(state["msg_id"])
        self.events = list(state["events"])  # e.g. disconnects that committed an open unit of work
        held: set[int] = set()
        journal = self.journal_file
        if journal is not None and journal.exists():
            for line in journal.read_text(encoding="ascii").splitlines():
                parts = line.split()
                if len(parts) == 2 and int(parts[0]) == self._generation:  # a torn last line is skipped
                    held.add(int(parts[1]))
        backed_out = 0
        self.queues = {}
        for q in state["queues"]:
            queue = self.queues[q["name"]] = FakeQueue(q["name"], **q["attributes"])
            for m in q["messages"]:
                message = StoredMessage(m["data"], m["md"], m["properties"], m["seq"])
                if m["held"] or m["seq"] in held:
                    # The process that got it under syncpoint died: MQ backs its unit of work out.
                    message.md["BackoutCount"] += 1
                    backed_out += 1
                queue.messages.append(message)
        self.load_pubsub(state.get("pubsub", {}))  # durable subscriptions outlive the restart
        self.recovered = {"messages_backed_out": backed_out}
        if backed_out:
            self.events.append(("recovered_uow", {"messages_backed_out": backed_out}))

    def _persist(self) -> None:
        if self.state_file is not None and not self._persist_paused:
            self.save()

    def _journal_get(self, message: StoredMessage) -> None:
        if self._journal is not None:
            self._journal.write(f"{self._generation} {message.seq}\n")
            self._journal.flush()  # to the OS: survives the process's SIGKILL

    @contextlib.contextmanager
    def deferred_persistence(self) -> Iterator[None]:
        """Many test-side changes, one snapshot at the end (persistent mode)."""
        with self.cond:
            self._persist_paused += 1
        try:
            yield
        finally:
            with self.cond:
                self._persist_paused -= 1
                self._persist()
