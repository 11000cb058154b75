"""Maintenance of landed tables: a policy decides what; the engine rewrites a Parquet container.

`engine/` is what every rewrite does, whoever asked for it: take the table's locks, list the
container's files, leave the files of bulks not yet recorded as published alone, group the files by
message type, write the new container beside the live one, swap it in with one
`renameat2(RENAME_EXCHANGE)`, record the swap (and recover a rewrite that was killed), learn what it
cost, and run rounds on a thread of the bridge. It imports neither policy.

The policies are siblings, neither importing the other: `purge/` decides which rows go (a
retention's designation) and whether to delete them or copy the survivors (`mqbridge purge`,
`[purge] interval`); `compaction/` decides which containers to merge and merges them ordered by
`put_timestamp`. `rounds` (`mqbridge compact`) and `compaction_scheduler` (`[compaction] interval`)
ask both, container by container, for the cheapest action.

A table format with its own rewrite commands (Delta Lake's DELETE, OPTIMIZE and VACUUM) plugs in
through its `TableFormat` (`mqbridge.table_formats`: its purger and its part of a compaction round):
the policies keep deciding what, the format carries it out.
"""

from __future__ import annotations

from mqbridge.maintenance.compaction import Compactor
from mqbridge.maintenance.compaction_scheduler import CompactionScheduler
from mqbridge.maintenance.engine import CostModel, RoundScheduler, purge_history, recover_purges
from mqbridge.maintenance.purge import Designation, PurgeFactory, Purger, PurgeScheduler
from mqbridge.maintenance.rounds import Compaction

__all__ = ["Compaction", "CompactionScheduler", "Compactor", "CostModel", "Designation", "PurgeFactory",
           "PurgeScheduler", "Purger", "RoundScheduler", "purge_history", "recover_purges"]
