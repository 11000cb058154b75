"""Deleting landed entries from outside (`mqbridge tables delete`, the control plane's
`POST /tables/delete`): a wrongly landed message, a right-to-erasure request by identity.

The rows go through each table's format's own machinery, the purge's (`PurgeFactory.purger_for`),
never a rewrite of its own: a Delta table by Delta's `DELETE` (one commit per put_date partition,
conflicts with a landing bulk tried again), a Parquet table by the purge engine's swap of containers
(delete or copy-and-drop as the cost model says). A type's rows only, where other types share its table.

What designates the rows:

* `identities`: a Delta table's `identity` column (what the ledger recognises a message by), as
  the ledger keeps it or without its scope prefix (`SOURCE:QUEUE|`, `mqbridge.identity.scoped`), so
  an operator may give the id the producer knows. A Parquet table has no identity column: there an
  identity designates the row whose `msg_id` it is (the identity under the default rule `msg_id`);
  for a header or body-hash identity, designate the rows by `where` (`headers['NAME'] IN (...)`).
* `where`: a Spark SQL condition on the landed columns.

The ledger is not changed: it keeps the deleted messages' identities for `dedupe_window`, so a
redelivery of a deleted message is recognised as landed and not landed again
(docs/operations.md "Deleting or correcting entries").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from mqbridge.errors import ConfigError, PurgeError
from mqbridge.maintenance.purge.designation import sql_string

if TYPE_CHECKING:
    from mqbridge.config import BridgeConfig

log = logging.getLogger("mqbridge.tables")  # the name operators configure

#: The most identities one request names (each is a literal of one SQL condition).
MAX_IDENTITIES = 10_000


@dataclass(frozen=True)
class Deleted:
    """What a deletion did to one table: the rows it designated (and, unless a dry run, deleted),
    the containers (put_date partitions) they were in, and the condition that designated them."""

    table: str
    format: str
    rows: int
    containers: int
    condition: str
    dry_run: bool

    def line(self) -> str:
        """The table's line of the command's output."""
        verb = "would delete" if self.dry_run else "deleted"
        return (f"{self.table} ({self.format}): {verb} {self.rows} rows in {self.containers} containers "
                f"where {self.condition}")


def designating(identities: Sequence[str], where: str | None, *, identity_column: str | None) -> str:
    """The Spark SQL condition of the rows `identities` or `where` designate in a table whose rows
    carry their identity in `identity_column` (None: they carry none); exactly one of the two is given."""
    if bool(identities) == bool(where and where.strip()):
        raise ConfigError("give the rows to delete by --identity or by --where (one of the two)")
    if where:
        return where.strip()
    if len(identities) > MAX_IDENTITIES:
        raise ConfigError(f"{len(identities)} identities: at most {MAX_IDENTITIES} a request; split it")
    listed = ", ".join(sql_string(i) for i in identities)
    if identity_column is None:
        return f"msg_id IN ({listed})"
    # As the ledger keeps it, or without its scope prefix ("SOURCE:QUEUE|id": what the producer knows).
    return (f"({identity_column} IN ({listed}) OR "
            f"substring({identity_column}, instr({identity_column}, '|') + 1) IN ({listed}))")


def who(caller: str | None = None) -> str:
    """Who asks, for the log: the OS user running the command, and the control plane's caller
    (its address) when the request came over HTTP."""
    import getpass

    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no login name and no passwd entry (a bare container)
        user = "unknown user"
    return f"OS user {user}" + (f", control-plane caller {caller}" if caller else "")


def delete_entries(config: BridgeConfig, spark: Any, message_type: str, *, identities: Sequence[str] = (),
                   where: str | None = None, reason: str, requested_by: str,
                   dry_run: bool = False) -> list[Deleted]:
    """Delete the rows of `message_type` that `identities` or `where` designate from each table the
    type lands in (a template's: every one of them), each by its format's purger; logged at WARNING
    with `requested_by` and `reason`. ConfigError for a request that names no rows, an unknown
    type, or no reason; PurgeError when a table cannot evaluate the condition."""
    from mqbridge.landing.tables import holders, type_tables
    from mqbridge.maintenance.purge import Designation, PurgeFactory
    from mqbridge.maintenance.purge.designation import type_designations

    if message_type not in config.types:
        raise ConfigError(f"--type {message_type}: not a configured type (configured: {', '.join(config.types)})")
    if not reason.strip():
        raise ConfigError("--reason: say why the rows are deleted (it is logged with who asked)")
    factory = PurgeFactory(config)
    now = datetime.now(timezone.utc)
    done: list[Deleted] = []
    for path, names in type_tables(factory.warehouse, {message_type: config.types[message_type]}).items():
        table_format = factory.format_of(path)
        table = str(path.relative_to(factory.warehouse))
        condition = designating(identities, where, identity_column=table_format.identity_column)
        [designation] = type_designations(names, {}, holders(factory.warehouse, path, config.types), now=now,
                                          where=condition)
        assert isinstance(designation, Designation)
        if not table_format.holds(path):
            done.append(Deleted(table, table_format.title, 0, 0, designation.describe(), dry_run))
            continue
        purger = factory.purger_for(path, spark)
        if not dry_run:
            table_format.recover(path)  # a purge or compaction killed mid-run: finished or rolled back first
        # A transactional table by its own DELETE (a partition all designated: every file dropped, still a
        # DELETE); a Parquet table by the cost model's choice.
        plans = purger.plan(path, designation, "delete" if table_format.transactional else "auto")
        designated = sum(plan.designated for plan in plans)
        log.warning("tables delete%s: type %s, table %s: %d rows in %d containers designated %s; requested by %s; "
                    "reason: %s", " (dry run)" if dry_run else "", message_type, table, designated, len(plans),
                    designation.describe(), requested_by, reason)
        deleted = designated if dry_run else sum(result.rows_deleted for result in purger.run(plans, designation))
        if not dry_run:
            log.warning("tables delete: type %s, table %s: %d rows deleted; requested by %s; reason: %s",
                        message_type, table, deleted, requested_by, reason)
        done.append(Deleted(table, table_format.title, deleted, len(plans), designation.describe(), dry_run))
    if not done:
        raise PurgeError(f"type {message_type}: no table of it under the warehouse yet: nothing to delete")
    return done


def request_deleter(config: BridgeConfig,
                    session: Callable[[], Any]) -> Callable[[dict[str, Any], str], dict[str, Any]]:
    """The control plane's `POST /tables/delete` (`mqbridge.monitoring.control`) on a running bridge:
    a JSON request `{"type", "identity" | "where", "reason", "dry_run"}` deleted by `delete_entries`
    on the bridge's Spark session (`session`: started if needed), the caller logged with the OS user."""

    def delete(request: dict[str, Any], caller: str) -> dict[str, Any]:
        unknown = sorted(set(request) - {"type", "identity", "where", "reason", "dry_run"})
        if unknown:
            raise ConfigError(f"unknown field {', '.join(unknown)}")
        message_type, identities, where = request.get("type"), request.get("identity") or [], request.get("where")
        reason, dry_run = request.get("reason"), request.get("dry_run", False)
        if not isinstance(message_type, str):
            raise ConfigError('"type": the message type whose rows go, a string')
        if not isinstance(identities, list) or not all(isinstance(i, str) for i in identities):
            raise ConfigError('"identity": a list of strings')
        if where is not None and not isinstance(where, str):
            raise ConfigError('"where": a Spark SQL condition, a string')
        if not isinstance(reason, str):
            raise ConfigError('"reason": why the rows are deleted, a string')
        if not isinstance(dry_run, bool):
            raise ConfigError('"dry_run": true or false')
        done = delete_entries(config, session(), message_type, identities=identities, where=where, reason=reason,
                              requested_by=who(caller), dry_run=dry_run)
        return {"type": message_type, "dry_run": dry_run, "rows": sum(d.rows for d in done),
                "tables": [{"table": d.table, "format": d.format, "rows": d.rows, "containers": d.containers,
                            "condition": d.condition} for d in done]}

    return delete
