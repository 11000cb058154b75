"""Drive a replay: resolve the batches a kill left in doubt, then send the rows not yet sent in
batches, each recorded before its unit of work and marked sent after it.

Per batch, in this order (why a kill anywhere sends no row twice and loses none):

    1. ledger: batch recorded as `intent`, with its rows' keys
    2. target: one unit of work holding the rows and a marker naming the batch; commit
    3. ledger: batch marked `sent`

Killed before 2 commits, nothing of the batch is at the target, and its marker is not either: a
resumed replay forgets the batch and sends its rows again. Killed between 2 and 3, the marker is
there: the batch is marked sent. The target answers that question (`committed`) from the markers.

A target whose unit of work is not atomic (RabbitMQ: each row confirmed by its receipt, the marker
last) makes step 2 the rows, then the marker. A kill between them leaves rows without a marker: the
resumed replay sends the batch again (those rows twice, said in the target's `guarantee`). A row the
target refuses stops the replay (PartlySentError): the rows it confirmed are recorded sent, the
others forgotten (`ReplayLedger.keep_sent`), so the next run sends exactly those.

Before the first batch, `before_sending` may refuse the replay (the command checks there that the
bridge reading the destination would not drop the rows as already landed: `identities`); a target
refuses, when it is built, a destination that would drop every message (`mqbridge.drivers.replay_target`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from mqbridge import failpoints
from mqbridge.errors import PartlySentError
from mqbridge.resend.replay.identities import AS_LANDED, Delivered, Renewal
from mqbridge.resend.replay.ledger import ReplayLedger
from mqbridge.resend.replay.rows import ReplayRow

if TYPE_CHECKING:
    from mqbridge.config import SourceConfig

class ReplayTarget(Protocol):
    """Where a replay sends: one destination of one source, with a marker queue of its own."""

    guarantee: str  # one line for the command's output: what a kill can do
    notes: list[str]  # what the destination check found worth saying (nothing wrong enough to refuse)

    def delivered(self, row: ReplayRow) -> Delivered:
        """What a consumer of the destination sees of `row` as sent: its headers, its message id."""

    def committed(self, batch_ids: Sequence[str]) -> set[str]:
        """Which of these batches' units of work committed (their markers are at the target)."""

    def send(self, batch_id: str, rows: Sequence[ReplayRow]) -> None:
        """Send `rows` and the batch's marker in one unit of work, and commit it; or (a target that
        cannot make them one unit: RabbitMQ) each confirmed, the marker last. A target that stopped
        part-way raises PartlySentError with the keys of the rows it confirmed."""

    def release(self) -> None:
        """Remove the markers of batches the ledger has marked sent (they are no longer needed)."""

    def close(self) -> None:
        """Close the connection."""


class ReplayTargetFactory(Protocol):
    """A source kind's replay sender (`mqbridge.drivers.Driver.replay`): builds a connected target."""

    def __call__(self, source_name: str, config: SourceConfig, destination: str, replay_id: str,
                 in_doubt_wait: float, *, renewal: Renewal = AS_LANDED) -> ReplayTarget: ...


@dataclass
class ReplayReport:
    """What a run of a replay did."""

    sent: int = 0  # rows sent by this run
    skipped: int = 0  # rows an earlier run had sent
    batches: int = 0
    resolved_sent: int = 0  # batches in doubt that had committed
    resolved_again: int = 0  # batches in doubt that had not: their rows were sent again
    last_batch: str = ""


def replay(rows: Iterable[ReplayRow], target: ReplayTarget, ledger: ReplayLedger, replay_id: str, *,
           batch: int, say: Callable[[str], None],
           before_sending: Callable[[set[str]], None] | None = None) -> ReplayReport:
    """Send `rows` to `target` once each across runs of `replay_id` (module docstring).
    `before_sending` is called with the keys of the rows sent already (by earlier runs), after the
    batches in doubt are resolved and before anything is sent; it refuses by raising."""
    report = ReplayReport()
    report.resolved_sent, report.resolved_again = settle(target, ledger, replay_id)
    if report.resolved_sent or report.resolved_again:
        say(f"{report.resolved_sent + report.resolved_again} batches a killed run left in doubt: "
            f"{report.resolved_sent} had been sent, {report.resolved_again} had not (their rows are sent now)")
    done = ledger.keys(replay_id)
    if before_sending is not None:
        before_sending(done)
    pending: list[ReplayRow] = []
    for row in rows:
        if row.key in done:
            report.skipped += 1
            continue
        pending.append(row)
        if len(pending) >= batch:
            _send(pending, target, ledger, replay_id, report, say)
            pending = []
    if pending:
        _send(pending, target, ledger, replay_id, report, say)
    if report.last_batch:  # markers arrive in order: once the last is here, all are, and can go
        target.committed([report.last_batch])
    target.release()
    return report


def settle(target: ReplayTarget, ledger: ReplayLedger, replay_id: str) -> tuple[int, int]:
    """The batches of `replay_id` a kill (or a lost connection) left in doubt, decided by their markers
    at `target`: marked sent where the marker is there, forgotten (their rows go again) where it is
    not. (How many had been sent, how many had not.)"""
    doubtful = ledger.in_doubt(replay_id)
    if not doubtful:
        return 0, 0
    committed = target.committed(doubtful)
    for batch_id in doubtful:
        if batch_id in committed:
            ledger.mark_sent(replay_id, batch_id)
        else:
            ledger.forget(replay_id, batch_id)
    sent = sum(1 for batch_id in doubtful if batch_id in committed)
    return sent, len(doubtful) - sent


def _send(rows: list[ReplayRow], target: ReplayTarget, ledger: ReplayLedger, replay_id: str,
          report: ReplayReport, say: Callable[[str], None]) -> None:
    try:
        batch_id = send_batch(rows, target, ledger, replay_id)
    except PartlySentError as stopped:
        report.sent += len(stopped.arrived)
        raise
    report.sent += len(rows)
    report.batches += 1
    report.last_batch = batch_id
    target.release()
    say(f"sent {report.sent} rows so far ({report.skipped} sent before)")


def send_batch(rows: Sequence[ReplayRow], target: ReplayTarget, ledger: ReplayLedger, replay_id: str) -> str:
    """Send `rows` as one batch of `replay_id` by the protocol of the module docstring (recorded,
    sent with its marker, marked sent); its id. A target that stopped part-way: the rows it confirmed
    are recorded sent, the others forgotten, and PartlySentError propagates."""
    batch_id = uuid.uuid4().hex
    ledger.intend(replay_id, batch_id, [row.key for row in rows])
    try:
        target.send(batch_id, rows)
    except PartlySentError as stopped:
        # The target confirmed these rows alone (RabbitMQ, a row refused): recorded sent, the rest not.
        ledger.keep_sent(replay_id, batch_id, stopped.arrived)
        raise
    failpoints.hit("replay_after_commit")
    ledger.mark_sent(replay_id, batch_id)
    return batch_id
