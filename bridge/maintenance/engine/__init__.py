"""The rewrite engine: what every policy's rewrite of a Parquet container does, whatever rows or
files it chose. It imports no policy.

The modules: `rewrite` (the steps of one rewrite: its work directory, the new container and its
journal, the marker, the files carried as they are), `swap` (the exchange with the live container in
one `renameat2(RENAME_EXCHANGE)`, the table's history of swaps, and `recover_purges` for a rewrite
that was killed), `type_groups` (a container's files by message type: each rewrite reads one type's
files at a time), `costs` (the learned cost model every plan estimates with) and `scheduler` (the
`RoundScheduler` thread a running bridge runs a policy's rounds on). The table's locks and the
unpublished bulks a rewrite leaves alone are landing's (`mqbridge.landing.containers`, `publication`).
"""

from __future__ import annotations

from mqbridge.maintenance.engine.costs import Coefficients, CostModel, Estimate
from mqbridge.maintenance.engine.rewrite import begin, carry, container_work, seal
from mqbridge.maintenance.engine.scheduler import RoundScheduler
from mqbridge.maintenance.engine.swap import (
    HISTORY,
    PURGE_SLACK,
    WORK,
    exchange,
    purge_history,
    record_purge,
    recover_purges,
    swap_history,
    swaps_since,
)
from mqbridge.maintenance.engine.type_groups import TypeGroups, type_groups

__all__ = ["HISTORY", "PURGE_SLACK", "WORK", "Coefficients", "CostModel", "Estimate", "RoundScheduler", "TypeGroups",
           "begin", "carry", "container_work", "exchange", "purge_history", "record_purge", "recover_purges", "seal",
           "swap_history", "swaps_since", "type_groups"]
