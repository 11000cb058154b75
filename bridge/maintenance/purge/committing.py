"""What the purges of tables that commit by their own log (Delta Lake, Iceberg) share: a put_date
partition as a condition, the run over the planned partitions (one commit each, the table's version
before the first noted, the clean-up of each table a commit changed after the last), a commit tried
again when it conflicts with another writer's, and the counters every purge keeps
(`mqbridge.maintenance.purge.purger.account`).

A format's purger (`mqbridge.maintenance.delta.purger`, `mqbridge.maintenance.iceberg.purger`)
subclasses `CommittingPurger` and says how it reads its table's version, commits one partition's
purge, recognises a conflict and cleans up after a run.
"""

from __future__ import annotations

import logging
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from mqbridge.config.warehouse import Location
from mqbridge.counters import Counters
from mqbridge.errors import PurgeError
from mqbridge.maintenance.engine.costs import CostModel
from mqbridge.maintenance.purge.designation import Designation
from mqbridge.maintenance.purge.purger import ContainerPlan, ContainerResult, account

#: Attempts of one partition's commit that conflicts with other writers' commits.
CONFLICT_TRIES = 3
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def partition_condition(table: object, put_date: str) -> str:
    """The put_date partition `put_date` of `table` as a Spark SQL condition (PurgeError if it is no date)."""
    if not _DATE.fullmatch(put_date):
        raise PurgeError(f"table {table}: put_date {put_date!r} is not a date")
    return f"put_date = DATE'{put_date}'"


@dataclass
class CommittingPurger(ABC):
    """The run of a purge whose every partition is one commit of its table (see the module docstring);
    subclasses give `_version`, `_purge` and `_clean_up`, and their `plan` and `summary`."""

    spark: Any
    model: CostModel
    vacuum_retention: float
    counters: Counters = field(default_factory=Counters)
    stop: threading.Event = field(default_factory=threading.Event)
    _before: dict[Location, Any] = field(default_factory=dict)
    _done: dict[Location, dict[str, int]] = field(default_factory=dict)

    #: The purge's logger (`mqbridge.purge.<format>`, the name operators configure).
    log: ClassVar[logging.Logger] = logging.getLogger("mqbridge.purge")
    #: What a new version of the table is called in the log ("version", "snapshot").
    version_word: ClassVar[str] = "version"

    def run(self, plans: list[ContainerPlan], designation: Designation) -> Iterator[ContainerResult]:
        """Purge each planned partition, one commit each, yielding its result as it is done; then clean
        up each table that a commit changed (`_clean_up`)."""
        changed: list[Location] = []
        for plan in plans:
            if self.stop.is_set():
                break
            if plan.table not in self._before:
                self._before[plan.table] = self._version(plan.table)
            result = self._purge(plan, designation)
            done = self._done.setdefault(plan.table, {})
            done[result.strategy] = done.get(result.strategy, 0) + 1
            if plan.table not in changed:
                changed.append(plan.table)
            account(self.counters, result)
            yield result
        for table in changed:
            if self.stop.is_set():
                break
            self._clean_up(table)

    def _committed(self, plan: ContainerPlan, strategy: str, commit: Callable[[], tuple[int, int]],
                   conflict: Callable[[BaseException], bool], name: str) -> tuple[int, int]:
        """`commit()` (one commit of the partition of `plan`: rows deleted, rows written), tried again on
        the table's new version while it conflicts with another writer's commit, up to CONFLICT_TRIES."""
        for attempt in range(1, CONFLICT_TRIES + 1):
            try:
                return commit()
            except Exception as exc:
                if not conflict(exc) or attempt == CONFLICT_TRIES:
                    raise
                self.counters.inc("purge_conflicts")
                self.log.warning("purge %s put_date=%s: the %s conflicted with another commit (%s); trying again on "
                                 "the table's new %s", name, plan.put_date, strategy,
                                 str(exc).strip().splitlines()[0][:300], self.version_word)
        raise AssertionError("unreachable")  # the last attempt returned or raised

    @abstractmethod
    def _version(self, table: Location) -> Any:
        """The table's version (or snapshot) before the run's first commit to it."""

    @abstractmethod
    def _purge(self, plan: ContainerPlan, designation: Designation) -> ContainerResult:
        """One partition's purge: its commit, timed, and the cost model taught."""

    @abstractmethod
    def _clean_up(self, table: Location) -> None:
        """After the run's commits to `table`: what removes the files they replaced (VACUUM, expiry)."""
