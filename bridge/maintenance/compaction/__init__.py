"""The compaction policy: which containers to merge (`planner`: enough small files, room on the
disk), and the merge itself, every type's rows sorted by `put_timestamp` across the container into
files of a target size (`compactor`); `verify` is how `mqbridge ledger --verify` checks bulks whose
files a compaction replaced. The rewrite and the swap are the engine's (`mqbridge.maintenance.engine`);
the round that asks both policies per container is `mqbridge.maintenance.rounds`. Compaction imports
nothing of the purge policy.
"""

from __future__ import annotations

from mqbridge.maintenance.compaction.compactor import Compacted, Compactor
from mqbridge.maintenance.compaction.planner import ACTIONS, Facts, Plan, Policy, decide

__all__ = ["ACTIONS", "Compacted", "Compactor", "Facts", "Plan", "Policy", "decide"]
