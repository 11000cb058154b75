"""The backout log: a bounded record, in `[bridge] state_dir`, of the messages moved to a backout
queue and why, so that `mqbridge where` and `GET /messages/<id>` can say where a message went
(`mqbridge.tracing.where`) after the log line and the status page's recent moves are gone.

    <state_dir>/backout.log       JSON lines, newest last: time, listener, queue, backout_queue,
    <state_dir>/backout.log.1     msg_id, identity, message_type, delivery_count, reason
    <state_dir>/backout.log.lock  empty: what the writers lock

What a line holds. The message's ids and the reason (one line, at most REASON_CHARS characters,
every configured secret replaced by `***` as in the log), never its body or headers. The files are
created 0600 in a 0700 `state_dir`, like the ledger (`mqbridge.strict_modes`).

Bounds. When `backout.log` holds `max_entries` lines it becomes `backout.log.1` (replacing the one
before): at most 2 x `max_entries` moves are kept, the newest. A line older than `max_age` is never
reported, and a process's first write (and one an hour after) removes such lines from both files:
by count and by age, whichever comes first.

Never in the way of a move. `record` only queues the lines (it never waits for the disk); a thread
of its own appends them, under an exclusive `flock` of `backout.log.lock` that every bridge process
sharing the `state_dir` takes for its writes and rotations (readers take none: a rotation is a
rename). A line that cannot be written (a full disk, a `state_dir` that is not writable, more than
MAX_PENDING lines waiting) is counted and logged as a warning, at most once a minute: the move
itself is committed already. A line still queued when the process is killed is lost (`close`
writes what is queued at a graceful stop).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import queue
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from mqbridge.identity import answers_to
from mqbridge.message import Message
from mqbridge.strict_modes import PRIVATE_FILE, private_dir, private_file

log = logging.getLogger("mqbridge.backout_log")  # the name operators configure

#: The log's file name under `[bridge] state_dir` (the rotated file adds ".1").
BACKOUT_LOG_FILE = "backout.log"
#: Lines per file: the newest 10,000 to 20,000 moves are kept.
MAX_ENTRIES = 10_000
#: Seconds a move is kept: 30 days.
MAX_AGE = 30 * 86_400.0
#: The longest reason kept (the rest is cut, with "...").
REASON_CHARS = 1_000
#: Lines waiting for the writer thread; more are dropped (and counted) rather than held in memory.
MAX_PENDING = 10_000
#: Seconds between two warnings about lines that could not be written.
WARN_EVERY = 60.0
#: Seconds between two passes that remove lines older than `max_age`.
EXPIRE_EVERY = 3_600.0


class Move(Protocol):
    """A move as the listener loop and the adapters describe it (`mqbridge.source.BackoutMove`)."""

    @property
    def message(self) -> Message: ...
    @property
    def reason(self) -> str: ...
    @property
    def queue(self) -> str | None: ...


@dataclass(frozen=True)
class MovedMessage:
    """One line of the backout log: a message moved to a backout queue."""

    time: float  # epoch seconds of the commit that moved it
    listener: str  # e.g. "amq:/queue/orders#1"
    queue: str  # the queue it was read from
    backout_queue: str  # where it went ("": the source's default, e.g. an IBM MQ queue's BOQNAME)
    msg_id: str
    identity: str  # its identity for the landing ledger ("" when not known)
    reason: str
    message_type: str = ""
    delivery_count: int = 0

    def matches(self, key: str) -> bool:
        return key == self.msg_id or answers_to(self.identity, key)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def one_line(reason: str, secrets: Iterable[str] = ()) -> str:
    """`reason` on one line, each secret replaced by `***`, cut to REASON_CHARS."""
    text = " ".join(reason.split())
    for secret in secrets:
        text = text.replace(secret, "***")
    return text if len(text) <= REASON_CHARS else text[:REASON_CHARS - 3] + "..."


class BackoutLog:
    """The backout log of one `state_dir` (see the module docstring). Thread-safe; `record` never
    blocks on the disk. `close` writes what is queued and stops the writer thread."""

    def __init__(self, path: Path, *, secrets: Iterable[str] = (), max_entries: int = MAX_ENTRIES,
                 max_age: float = MAX_AGE, clock: Any = time.time) -> None:
        self.path = Path(path)
        self.rotated = self.path.with_name(self.path.name + ".1")
        self.max_entries = max(1, max_entries)
        self.max_age = max_age
        self._secrets = sorted({s for s in secrets if s}, key=len, reverse=True)
        self._clock = clock
        self._pending: queue.Queue[MovedMessage | None] = queue.Queue(MAX_PENDING)
        self._start_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False
        #: (inode, size, lines) of the current file as this process last left it (None: not yet).
        self._known: tuple[int, int, int] | None = None
        self._next_expiry = 0.0
        self._problems = 0  # lines that could not be written since the last warning
        self._next_warning = 0.0
        self.lost = 0  # lines never written (for tests and the log)

    @classmethod
    def in_state_dir(cls, state_dir: Path, **options: Any) -> BackoutLog:
        """The log of a `[bridge] state_dir`."""
        return cls(Path(state_dir) / BACKOUT_LOG_FILE, **options)

    # -- writing --------------------------------------------------------------------------------
    def record_moves(self, moves: Iterable[Move], *, listener: str, queue: str,
                     default_queue: str | None = None) -> None:
        """Log each of `moves`, committed just now by `listener` on `queue` (`default_queue`: where a
        move without a queue of its own went). Never raises, never waits for the disk."""
        now = self._clock()
        for move in moves:
            message = move.message
            self.record(MovedMessage(now, listener, queue, move.queue or default_queue or "", message.msg_id,
                                     message.identity, move.reason, message.message_type, message.delivery_count))

    def record(self, moved: MovedMessage) -> None:
        """Queue one line for the writer thread. Never raises, never waits for the disk."""
        try:
            moved = dataclasses.replace(moved, reason=one_line(moved.reason, self._secrets))
            if self._closed:
                raise RuntimeError("the backout log is closed")
            self._pending.put_nowait(moved)
            self._start()
        except Exception as exc:  # a full queue, a closed log: the move is committed all the same
            self._could_not_write(1, exc)

    def _start(self) -> None:
        if self._thread is not None:
            return
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._write_loop, name="mqbridge-backout-log", daemon=True)
                self._thread.start()

    def close(self, timeout: float = 5.0) -> None:
        """Write what is queued (for at most `timeout` seconds) and stop the writer thread."""
        self._closed = True
        thread = self._thread
        if thread is None:
            return
        with contextlib.suppress(queue.Full):
            self._pending.put(None, timeout=timeout)
        thread.join(timeout)

    def _write_loop(self) -> None:
        while True:
            first = self._pending.get()
            batch = [first] if first is not None else []
            stop = first is None
            while not stop:
                try:
                    more = self._pending.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                else:
                    batch.append(more)
            if batch:
                try:
                    self._write(batch)
                except Exception as exc:
                    self._could_not_write(len(batch), exc)
            if stop:
                return

    def _write(self, batch: list[MovedMessage]) -> None:
        """Append `batch` under the lock every process of this `state_dir` takes for its writes; rotate
        the file before it would pass `max_entries` lines, and drop lines older than `max_age`."""
        private_dir(self.path.parent)
        with self._locked():
            now = self._clock()
            if now >= self._next_expiry:
                self._next_expiry = now + EXPIRE_EVERY
                for path in (self.rotated, self.path):
                    _drop_older(path, now - self.max_age)
            lines = self._lines()
            rest = batch
            while rest:
                if lines >= self.max_entries:
                    os.replace(self.path, self.rotated)
                    lines = 0
                chunk, rest = rest[:self.max_entries - lines], rest[self.max_entries - lines:]
                private_file(self.path)
                with open(self.path, "ab") as file:
                    file.write("".join(json.dumps(m.to_json(), separators=(",", ":")) + "\n"
                                       for m in chunk).encode())
                lines += len(chunk)
            st = self.path.stat()
            self._known = (st.st_ino, st.st_size, lines)

    def _lines(self) -> int:
        """The lines of the current file: this process's count when the file is as this process left
        it, else counted again (another process wrote or rotated meanwhile)."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return 0
        if self._known is not None and self._known[:2] == (st.st_ino, st.st_size):
            return self._known[2]
        return _count_lines(self.path)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """The exclusive lock of this log's writers, on `backout.log.lock` (0600, never renamed)."""
        lock = self.path.with_name(self.path.name + ".lock")
        private_file(lock)
        fd = os.open(lock, os.O_WRONLY)
        try:
            _lock(fd)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _could_not_write(self, lines: int, exc: BaseException) -> None:
        self.lost += lines
        self._problems += lines
        now = time.monotonic()
        if now >= self._next_warning:
            self._next_warning = now + WARN_EVERY
            log.warning("backout log %s: %d lines could not be written (%s); the moves themselves are committed "
                        "and logged above", self.path, self._problems, exc)
            self._problems = 0

    # -- reading --------------------------------------------------------------------------------
    def find(self, key: str) -> MovedMessage | None:
        """The newest move (within `max_age`) of a message whose msg_id or identity is `key`."""
        found = None
        for moved in self.moves(key):
            found = moved
        return found

    def moves(self, key: str | None = None) -> Iterator[MovedMessage]:
        """The moves kept (within `max_age`), oldest first; with `key`, only those whose msg_id or
        identity it is. A line that does not parse (cut short by a crash) is skipped."""
        oldest = self._clock() - self.max_age
        needle = json.dumps(key)[1:-1] if key is not None else None
        for path in (self.rotated, self.path):
            for line in _lines(path):
                if needle is not None and needle not in line:
                    continue  # most lines: no JSON to parse
                moved = _parse(line)
                if moved is not None and moved.time >= oldest and (key is None or moved.matches(key)):
                    yield moved


def _lock(fd: int) -> None:
    try:
        import fcntl
    except ImportError:  # Windows: one bridge process per state_dir writes
        return
    fcntl.flock(fd, fcntl.LOCK_EX)


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except (FileNotFoundError, NotADirectoryError):
        return []


def _count_lines(path: Path) -> int:
    try:
        with open(path, "rb") as file:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: file.read(1 << 16), b""))
    except FileNotFoundError:
        return 0


def _parse(line: str) -> MovedMessage | None:
    try:
        fields = json.loads(line)
        moved = MovedMessage(**{name: fields[name] for name in MovedMessage.__dataclass_fields__ if name in fields})
    except (ValueError, TypeError):
        return None
    return moved if isinstance(moved.time, (int, float)) and isinstance(moved.msg_id, str) else None


def _drop_older(path: Path, cutoff: float) -> None:
    """Rewrite `path` without the lines older than `cutoff` (atomically, 0600), if it has any."""
    lines = _lines(path)
    keep = [line for line in lines if (moved := _parse(line)) is not None and moved.time >= cutoff]
    if len(keep) == len(lines):
        return
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
    try:
        if hasattr(os, "fchmod"):
            os.fchmod(fd, PRIVATE_FILE)
        os.write(fd, "".join(line + "\n" for line in keep).encode())
    finally:
        os.close(fd)
    os.replace(temporary, path)
