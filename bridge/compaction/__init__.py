"""Compaction: merge each container's (`put_date` partition's) small files into files of a target
size, sorted by `put_timestamp` across the container, or purge it by retention, whichever a per-
container plan chooses (`mqbridge compact`, and `[compaction] interval` in a running bridge).

The modules: `planner` (the pure decision per container), `compactor` (the Spark rewrite and the
purge's atomic swap), `rounds` (facts, plans and actions over a configuration's tables, shared by
the command and the scheduler), `schedule` (the `CompactionScheduler` of a running bridge) and
`verify` (how `mqbridge ledger --verify` checks bulks whose files a compaction replaced).
Compaction reuses the purge's swap, recovery and learned cost model (`mqbridge.purge`).
"""

from __future__ import annotations

from mqbridge.compaction.compactor import Compacted, Compactor
from mqbridge.compaction.planner import ACTIONS, Facts, Plan, Policy, decide
from mqbridge.compaction.rounds import Compaction, Done, TablePlan
from mqbridge.compaction.schedule import CompactionScheduler

__all__ = ["ACTIONS", "Compacted", "Compaction", "CompactionScheduler", "Compactor", "Done", "Facts", "Plan",
           "Policy", "TablePlan", "decide"]
