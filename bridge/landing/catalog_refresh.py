"""A catalog table's cached file listing dropped after a purge or a compaction swapped one of its
containers (`mqbridge.landing.catalog` registers the tables; this is apart so that the maintenance
modules that swap need nothing of the registration or the table formats)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

log = logging.getLogger("mqbridge.landing.catalog")  # the catalog's messages, by the name operators configure


def refresh_swapped(spark: Any, table: Path) -> None:
    """After a swap of a container of `table` (a landed table's directory, registered by its name,
    `table.name`): drop this session's cached file listing of the catalog table of that name, if there
    is one. A failure is logged, never raised: the swap is done, and a read by path sees it."""
    name = table.name
    try:
        if spark.catalog.tableExists(f"`{name}`"):
            spark.catalog.refreshTable(f"`{name}`")
            log.debug("catalog: table %s refreshed after a swap of one of its containers", name)
    except Exception as exc:
        log.warning("catalog: table %s could not be refreshed after a swap (this session may list removed "
                    "files; REFRESH TABLE %s): %s", name, name, " ".join(str(exc).split())[:300])
