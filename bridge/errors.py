"""The one error hierarchy of mqbridge.

Driver exceptions (stomp.py, pymqi, py4j/pyspark) are wrapped once, at the adapter edge, into
these types; nothing above that edge catches a driver's own exceptions.

Three base classes are *decisions* for the supervisor (`mqbridge.supervision.supervisor`), which looks up what a
failed listener thread raised: `FatalError` stops the bridge, `HaltListener` stops that listener for
good, `RetryLater` restarts it after `retry_after` seconds; anything else restarts it with capped
exponential backoff.
"""

from __future__ import annotations

from typing import ClassVar


class BridgeError(Exception):
    """Base class of every error mqbridge raises on purpose."""


class FatalError(BridgeError):
    """Retrying cannot help (a configuration error): the supervisor stops the whole bridge."""


class HaltListener(BridgeError):
    """This listener must not run again until an operator acts; the rest of the bridge goes on."""


class RetryLater(BridgeError):
    """Restart the listener after `retry_after` seconds, without counting it as a failure."""

    retry_after: ClassVar[float] = 60.0


class ConfigError(FatalError):
    """The configuration is invalid. The message names the file and the key path."""


class SourceError(BridgeError):
    """A source (queue manager or broker) refused or failed an operation."""


class SourceConnectionError(SourceError):
    """The connection to a source is lost or cannot be made; reconnecting may help."""


class SubscriptionInUseError(SourceConnectionError, RetryLater):
    """Another connection holds a durable subscription's client-id (ActiveMQ allows one): another
    bridge reads it (this one is its standby), or the broker has not yet noticed that this bridge's
    previous connection died. Retried every few seconds, as a warning, not as a lost connection."""

    retry_after: ClassVar[float] = 5.0


class SourceRefusedError(SourceError, HaltListener):
    """The broker refused the connection or the subscription (bad credentials, unknown virtual host,
    no permission on the queue): a configuration error, which reconnecting cannot mend. The message
    names the source key and carries the broker's own reason."""


class SourceTLSError(SourceError, HaltListener):
    """A TLS problem at connect (the broker's certificate not trusted, expired or for another host; a
    client certificate missing or refused; unreadable TLS files): a configuration error, which
    reconnecting cannot mend. The message names the source and the certificate problem."""


class InDoubtError(SourceError):
    """A commit was sent but its outcome is unknown (e.g. MQRC 2009 on MQCMIT, no STOMP receipt).

    The messages of that unit of work may be delivered again; their ids are in `msg_ids`.
    """

    def __init__(self, message: str, msg_ids: list[str]) -> None:
        super().__init__(message)
        self.msg_ids = msg_ids


class PartlySentError(SourceError):
    """A maintenance command (`mqbridge redrive`, `mqbridge replay`) stopped because the target did not
    confirm one of its SENDs (refused, or the connection ended): the message says why and what was
    left where. `arrived` names what the target did confirm (a re-drive: original message ids; a
    replay: the rows' keys), so that nothing confirmed is sent again and nothing else is recorded."""

    def __init__(self, message: str, arrived: frozenset[str]) -> None:
        super().__init__(message)
        self.arrived = arrived


class SourceQuiescingError(SourceError, RetryLater):
    """The queue manager is quiescing (being stopped for maintenance): finish the unit of work,
    start no new one, stop, and try again a minute later."""

    retry_after: ClassVar[float] = 60.0


class BackoutFailedError(SourceError, HaltListener):
    """A poison message could not be moved anywhere; the listener must stop, never drop it."""


class PoisonLoopError(HaltListener):
    """A message keeps failing and no backout threshold will ever move it (`backout_threshold = 0`,
    IBM MQ BOTHRESH(0)): its listener halts after `halt_after_failures` attempts instead of
    delivering it again forever. The message stays on its queue."""


class UnknownMessageTypeError(FatalError):
    """A message was handed to the collector for a type that has no executor registered."""


class CollectorClosedError(BridgeError):
    """The collector no longer accepts messages (shutdown in progress)."""


class PluginError(BridgeError):
    """A plugin could not be loaded, validated or called."""


class UnsafePluginPathError(PluginError):
    """A plugin file or folder may be changed by someone other than the service user or root."""


class PluginLoadError(PluginError):
    """Running a plugin file failed; `path` and `line` point at the cause."""

    def __init__(self, message: str, path: str | None, line: int | None) -> None:
        super().__init__(message)
        self.path = path
        self.line = line


class PreprocessorError(BridgeError):
    """A preprocessor raised while handling a message; the unit of work is rolled back."""

    def __init__(self, message: str, plugin: str) -> None:
        super().__init__(message)
        self.plugin = plugin


class WriteFailedError(BridgeError):
    """Its bulk write failed for this message (a retryable or permanent result): never raised, it
    is the `error` of a `Rollback` of kind "write_failed" (the result's reason is its text)."""


class UnitBackedOutError(BridgeError):
    """The unit of work went back to the queue whole because of other messages: never raised, it is
    the `error` of a `Rollback` of kind "unit_backout" (why the unit went back is its text)."""


class LedgerError(FatalError):
    """The landing ledger cannot be trusted: its file is corrupt, unreadable or not a ledger, or a
    prepared bulk can be neither rolled forward nor back. The message names the file or the bulk.
    Fatal because starting with an empty ledger would land again what was landed before."""


class PublicationError(FatalError):
    """A staged file of a bulk is gone and its published copy does not exist either: something
    other than the bridge changed the table's directory. Publishing cannot go on safely."""


class StuckBulkError(HaltListener):
    """A prepared bulk of a process that is gone cannot be rolled forward: some of its staged files
    are gone and were never published. Retrying cannot help and guessing could lose or duplicate its
    messages: an operator decides (`mqbridge ledger --abandon BULK`, `mqbridge.landing.stuck`). Only
    what needs that bulk waits (its table's sinks, a listener that meets its messages); the message
    names the bulk, its table and the command."""

    def __init__(self, message: str, bulk_id: str, table: str) -> None:
        super().__init__(message)
        self.bulk_id = bulk_id
        self.table = table


class IdentityError(BridgeError):
    """A message has no identity under its listener's rule (e.g. the identity header is missing):
    a per-message failure, handled like a body that does not parse."""


class DuplicateIdentityError(BridgeError):
    """`Ledger.prepare` found identities that a published bulk already holds (another process
    landed them after this one checked). Their messages are given back, uncounted: on redelivery
    the check finds them published and the messages are committed without landing again
    (`mqbridge.landing.executor`)."""

    def __init__(self, message: str, identities: list[str]) -> None:
        super().__init__(message)
        self.identities = identities


class IdentityClaimedError(DuplicateIdentityError):
    """`Ledger.prepare` found identities that another *prepared* bulk holds: a bridge (this one or
    another) that read the same message before its source gave it here again is landing it now.
    Landing it here too could publish it twice, so these messages are given back, uncounted, and
    on redelivery the look-up waits for that bulk's fate (`Landing.published`)."""


class BulkFencedError(BridgeError):
    """A prepared bulk of this process was decided by another one while this one could not finish
    it (its owner's lease expired: a stalled or cut-off host; or an operator's `ledger --abandon`):
    forgotten (rolled back, a transactional table's version fenced) or published by that process.
    This process must not publish it again; a forgotten bulk's messages are given back, uncounted."""


class ReplayRefusedError(BridgeError):
    """A replay would send rows that the bridge reading its destination drops as already landed
    (`mqbridge.resend.replay.identities`): refused before anything is sent. The message names how many,
    and the way out (`--new-identity`)."""


class PurgeError(BridgeError):
    """A purge cannot run: its `--where` is not valid SQL for the table, another purge holds the
    table, or its designation is empty where one was required. The message names the table."""


class SparkUnavailableError(BridgeError):
    """Spark could not be started or reached."""


class SinkOutageError(BridgeError):
    """A sink (a type's table) cannot take writes for any message: Spark or its JVM is gone, the
    table path is unwritable, or a write exceeded `[spark] write_timeout`. Never the message's
    fault: the messages are given back without counting towards their backout threshold."""


class SparkWriteTimeoutError(SinkOutageError):
    """A Spark write ran longer than `[spark] write_timeout`; its job group was cancelled."""


class LedgerUnavailableError(SinkOutageError):
    """The landing ledger cannot be read or written right now: its disk is full or read-only, it
    stayed locked past the busy timeout, its database connection was lost. Nothing about any
    message: an outage of every sink that lands through it (unlike `LedgerError`, the ledger's
    records are not in doubt, and the bridge resumes once it answers again)."""


class StagingMismatchError(SinkOutageError):
    """The files staged for a bulk do not hold the bulk's rows (none found, or another row count
    in their Parquet footers): Spark wrote somewhere the bridge does not see, or something removed
    them. Nothing is published or committed; the unit goes back to the queue."""


class WarehouseInvisibleError(FatalError):
    """At start-up, a probe written through Spark is not visible to the bridge at the path it
    gave Spark: Spark's file system is not the bridge's (a Spark Connect server or a cluster
    without the shared warehouse path, an `fs.defaultFS` elsewhere). Landing would lose data."""


class StatusUnreachableError(BridgeError):
    """`mqbridge status`: the endpoint did not answer, or answered something that is not a
    bridge's status."""


class ControlError(BridgeError):
    """A run-time control command (`mqbridge listener ...`) the bridge refuses as given: a thread
    count out of range. The message says what would be accepted."""


class UnknownListenerError(ControlError):
    """A control command names no listener of the bridge; the message lists those there are."""


class AmbiguousListenerError(ControlError):
    """A control command names a queue that listeners of several sources read; the message asks for
    `source:queue` and lists them."""


class ControlConflictError(ControlError):
    """A control command that the listener's state does not allow (resume a stopped listener)."""


class ServiceError(BridgeError):
    """A service cannot be installed, removed or controlled here."""


class BridgeExitError(BridgeError):
    """The bridge ended with a non-zero status: the Windows service manager records a failure."""


#: A key path in the configuration: ("listeners", 0, "batch") is listeners[0].batch.
Loc = tuple[str | int, ...]


class KeyedError(ValueError):
    """Problems found by a configuration model validator, each with its key path relative to that
    model. A ValueError (not a BridgeError) because pydantic turns it into a validation error;
    the loader reports it as a ConfigError naming the file and the full key path."""

    def __init__(self, problems: list[tuple[Loc, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(".".join(map(str, loc)) + f": {msg}" for loc, msg in problems))


def one_line(exc: BaseException) -> str:
    """`ExceptionClass: first line of its message`, short enough for a header or a log line.

    For a Java exception that py4j did not translate, the root cause's (py4j's own text is only
    "An error occurred while calling o63.parquet").
    """
    name, text = type(exc).__name__, str(exc)
    java = getattr(exc, "java_exception", None)
    if java is not None:
        try:
            while java.getCause() is not None:
                java = java.getCause()
            qualified, _, text = str(java.toString()).partition(": ")
            name = qualified.rpartition(".")[2]
        except Exception:  # the JVM may be gone; py4j's text will do
            name, text = type(exc).__name__, str(exc)
    lines = text.strip().splitlines()
    first = lines[0].strip() if lines else ""
    text = f"{name}: {first}" if first else name
    return text if len(text) <= 300 else text[:297] + "..."
