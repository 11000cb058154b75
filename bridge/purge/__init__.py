"""Purge: remove designated rows from landed tables (`mqbridge purge`, and `[purge]` schedules in
a running bridge).

The modules: `purger` (one run over a table's containers by drop, delete or copy), `swap` (the
crash-safe swap of a rebuilt container, its history, and `recover_purges` for a run that was killed;
shared with `mqbridge.compaction`), `type_groups` (a container's files by message type: every
rewrite, the purge's and the compaction's, reads one type's files at a time), `costs` (the learned
cost model that picks the strategy), `schedule` (the `PurgeScheduler` of a running bridge) and
`factory` (the `PurgeFactory` both the command and the scheduler make their cost model, purgers and
designations with). Purge imports landing's table listing and locks, never the listener loop.
"""

from __future__ import annotations

from mqbridge.purge.costs import Coefficients, CostModel, Estimate
from mqbridge.purge.factory import PurgeFactory
from mqbridge.purge.purger import (
    ContainerPlan,
    ContainerResult,
    Designation,
    Purger,
    purge_history,
    record_purge,
    recover_purges,
    type_designations,
)
from mqbridge.purge.schedule import PurgeScheduler, due

__all__ = ["Coefficients", "ContainerPlan", "ContainerResult", "CostModel", "Designation", "Estimate",
           "PurgeFactory", "PurgeScheduler", "Purger", "due", "purge_history", "record_purge",
           "recover_purges", "type_designations"]
