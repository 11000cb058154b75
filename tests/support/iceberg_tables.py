"""What the tests of Iceberg tables share: a bridge's `[spark]` for Iceberg, and the table and ledger as an
independent reader sees them (pyiceberg through the bridge's catalog; the ledger read-only)."""

from __future__ import annotations

import collections
import re
import shutil
import sqlite3
from pathlib import Path
from typing import Any

from tests.support.delta_tables import JARS
from tests.support.exactly_once import account
from tests.support.processes import run_until_idle

#: `[spark]` of a bridge landing into Iceberg tables with its own driver.
ICEBERG_SPARK = f'master = "local[2]"\ntable_format = "iceberg"\njars_dir = "{JARS}"\nwriter = "spark"'


def iceberg_rows(catalog_properties: dict[str, str], table: str = "orders") -> collections.Counter[bytes]:
    """How often each body is in the table's current snapshot, read by pyiceberg under the catalog name
    `mqbridge` (Java's JdbcCatalog keeps the Spark catalog's name); empty when there is no table yet."""
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog("mqbridge", **catalog_properties)
    if not catalog.table_exists(("mqbridge", table)):
        return collections.Counter()
    scanned = catalog.load_table(("mqbridge", table)).scan(selected_fields=("body",)).to_arrow()
    return collections.Counter(bytes(b) for b in scanned.column("body").to_pylist())


def sqlite_catalog(tmp_path: Path) -> dict[str, str]:
    """pyiceberg's properties of a bridge's embedded catalog (`<warehouse>/_iceberg/catalog.db`)."""
    return {"type": "sql", "uri": f"sqlite:///{tmp_path / 'landing' / '_iceberg' / 'catalog.db'}",
            "init_catalog_tables": "false"}


def prepared_bulks(state_dir: Path) -> int:
    """How many bulks the bridge's ledger holds prepared (read-only)."""
    path = state_dir / "ledger.sqlite3"
    if not path.exists():
        return 0
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as ledger:
        return int(ledger.execute("SELECT count(*) FROM bulks WHERE state = 'prepared'").fetchone()[0])


def wiped_and_delivered_again_lands_once(config: Path, amq: Any, queue: str, sent: list[bytes],
                                         catalog: dict[str, str]) -> None:
    """Wipe the bridge's state_dir (its ledger: a replaced disk), send every message again, run until
    idle, and assert that the new ledger learnt the landed messages from the table through its catalog
    and that every message is in the table exactly once (0 lost, 0 duplicated, 0 unexpected), with the
    queue and its backout queue empty."""
    shutil.rmtree(config.parent / "state")
    amq.put_many(queue, sent)
    out = run_until_idle(config)
    assert re.search(r"ledger rebuilt from the tables: [1-9]\d* identities", out), out[-4000:]
    assert "already landed; committed without landing them again" in out, out[-4000:]
    result = account(sent, iceberg_rows(catalog))
    assert result.clean, f"{result}\n{out[-4000:]}"
    assert amq.depth(queue) == 0 and amq.depth(queue + ".backout") == 0
