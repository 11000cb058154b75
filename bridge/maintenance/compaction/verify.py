"""`mqbridge ledger --verify` after compactions: the published bulks whose files a compaction
replaced are checked by their rows, not their files.

A compaction keeps every row but moves it into new files shared with other bulks, so a bulk's files
are gone and its files' footers say nothing about it. Its rows still carry its `bulk_id`: counted in
the containers the bulk landed in (one column read per container), they must be exactly as many as
the ledger's identities of the bulk. A bulk spread over several tables (a `table` template such as
`"{destination}"`) is one ledger bulk per table, `<bulk_id>.<n>`, whose rows carry the bulk's own id
(`row_bulk_id`): counted in that table's containers, they are that ledger bulk's. A bulk whose
container a *purge* swapped since is not checked this way (the purge removed rows on purpose);
`--verify` says so.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mqbridge.landing.containers import data_files
from mqbridge.landing.verdicts import row_bulk_id
from mqbridge.maintenance.engine.swap import swap_history


def compacted_bulks(bulks: Sequence[Any], sizes: dict[str, int], *,
                    slack: float) -> tuple[set[str], list[tuple[str, str]]]:
    """Of `bulks` (ledger `PublishedBulk`s), those with a file in a container swapped since they were
    published (up to `slack` seconds before) only ever by compactions: (their ids, those of them
    whose rows in their containers are not `sizes[bulk_id]`, with what was found)."""
    histories: dict[str, dict[str, list[tuple[float, str]]]] = {}
    counted: dict[str, collections.Counter[str]] = {}
    checked: set[str] = set()
    wrong: list[tuple[str, str]] = []
    for bulk in bulks:
        containers = sorted({os.path.dirname(final) for _, final in bulk.files})
        swaps = []
        for container in containers:
            table = os.path.dirname(container)
            if table not in histories:
                histories[table] = swap_history(Path(table))
            swaps += [how for at, how in histories[table].get(os.path.basename(container), [])
                      if at >= bulk.published_at - slack]
        if not swaps or any(how != "compact" for how in swaps):
            continue
        checked.add(bulk.bulk_id)
        rows = sum(_bulk_rows(container, counted)[row_bulk_id(bulk.bulk_id)] for container in containers)
        if rows != sizes.get(bulk.bulk_id):
            wrong.append((bulk.bulk_id, f"{rows} rows in its compacted containers"))
    return checked, wrong


def _bulk_rows(container: str, counted: dict[str, collections.Counter[str]]) -> collections.Counter[str]:
    """Rows per bulk_id in `container`'s data files (read once per container)."""
    import pyarrow.parquet as pq

    if container not in counted:
        found: collections.Counter[str] = collections.Counter()
        for path in data_files(Path(container)):
            found.update(pq.read_table(path, columns=["bulk_id"]).column(0).to_pylist())
        counted[container] = found
    return counted[container]
