"""The purge policy: which rows go, and how (`mqbridge purge`, and `[purge] interval` in a running
bridge). The rewrite and the swap are the engine's (`mqbridge.maintenance.engine`).

The modules: `designation` (the rows that go: a retention's age, and/or SQL, restricted to a type's
rows where types share a table), `limits` (the cutoffs of a type's row cap and of the free-space
floor, from the rows counted by age), `purger` (one run over a table's containers by drop, delete or
copy, whichever the learned cost model says is cheaper), `scheduler` (the `PurgeScheduler` of a
running bridge, with the threshold below which a container waits) and `factory` (the `PurgeFactory`
the command, the scheduler and the compaction's rounds make their cost model, purgers and
designations with). Purge imports landing's table listing and locks, never the listener loop, and
nothing of the compaction policy.
"""

from __future__ import annotations

from mqbridge.maintenance.purge.designation import Designation, type_designations
from mqbridge.maintenance.purge.factory import PurgeFactory
from mqbridge.maintenance.purge.purger import ContainerPlan, ContainerResult, Purger
from mqbridge.maintenance.purge.scheduler import PurgeScheduler, due

__all__ = ["ContainerPlan", "ContainerResult", "Designation", "PurgeFactory", "PurgeScheduler", "Purger", "due",
           "type_designations"]
