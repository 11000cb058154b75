"""Delta Lake tables in tests: where the jars are, a bridge's `[spark]` that lands into Delta with its
own driver, and the rows of a table as delta-rs (an independent reader, not Spark) sees them."""

from __future__ import annotations

import collections
from pathlib import Path

from tests.support.processes import ROOT

#: The project's jar folder (`scripts/jars.sh delta`, `mqbridge jars`).
JARS = ROOT / "jars"
#: `[spark]` of a bridge landing into Delta tables with its own driver.
DELTA_SPARK = f'master = "local[2]"\ntable_format = "delta"\njars_dir = "{JARS}"\nwriter = "spark"'


def delta_rows(table: Path, column: str = "body") -> collections.Counter[bytes]:
    """How often each value of `column` (bytes) is in the Delta table at `table`, read by delta-rs."""
    import deltalake

    if not (table / "_delta_log").is_dir():
        return collections.Counter()
    values = deltalake.DeltaTable(str(table)).to_pyarrow_table(columns=[column]).column(column).to_pylist()
    return collections.Counter(bytes(v) for v in values)
