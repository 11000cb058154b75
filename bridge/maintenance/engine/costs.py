"""The rewrite cost model, learned from past runs: estimated seconds to delete a purge's designated
rows from a container, or to copy its survivors into a new one and drop the old (the purge's choice,
made by `estimate`), or to compact the container (`compact_seconds`).

    delete  = delete_row_seconds × rows of the files that hold both designated and surviving rows
              (those files are read and rewritten; a file of designated rows only is just removed)
    copy    = copy_row_seconds × surviving rows + container_seconds (create, swap in, drop the old)
    chosen  = copy when copy × (1 + margin) < delete, else delete; "drop" when every row is designated
    compact = compact_row_seconds × rows + container_seconds (every row read, sorted by put_timestamp
              across the container and rewritten into few files: `mqbridge.maintenance.compaction`)

Starting values come from `[purge]` (`compact_row_seconds`: `[compaction]`); after each run the
measured seconds pull the coefficients of the strategy that ran (or the compaction) towards what was
measured (an exponential moving average, weight `LEARNING_RATE`), and are kept in
`<state_dir>/purge_costs.json`. A coefficient the operator sets in `[purge]` is used as given;
the learned one is still kept, for the day the operator removes the setting.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from mqbridge.strict_modes import private_dir

log = logging.getLogger("mqbridge.purge.costs")  # the name operators configure

FILE_NAME = "purge_costs.json"
#: Weight of one run's measurement in the learned coefficients.
LEARNING_RATE = 0.5
#: Starting coefficients before any run: what seven runs learned on a 2-core machine with local[2]
#: Spark, 1 KB rows, a fresh `mqbridge purge` process each (docs/operations.md "Retention and purge").
DEFAULT_DELETE_ROW_SECONDS = 150e-6
DEFAULT_COPY_ROW_SECONDS = 100e-6
DEFAULT_CONTAINER_SECONDS = 1.5
#: A compaction sorts across the whole container (a range shuffle) where copy only sorts each file.
DEFAULT_COMPACT_ROW_SECONDS = 150e-6


@dataclass
class Coefficients:
    """Seconds per row rewritten by delete, per row copied, and per container created and dropped."""

    delete_row_seconds: float = DEFAULT_DELETE_ROW_SECONDS
    copy_row_seconds: float = DEFAULT_COPY_ROW_SECONDS
    container_seconds: float = DEFAULT_CONTAINER_SECONDS
    runs: int = 0
    compact_row_seconds: float = DEFAULT_COMPACT_ROW_SECONDS


@dataclass(frozen=True)
class Estimate:
    """What one container's purge would cost each way, and the strategy chosen."""

    delete_seconds: float
    copy_seconds: float
    strategy: str  # "delete" | "copy" | "drop"


class CostModel:
    """Learned coefficients (in `state_dir`), overridden by the operator's, plus a margin."""

    def __init__(self, path: Path, *, delete_row_seconds: float | None = None,
                 copy_row_seconds: float | None = None, container_seconds: float | None = None,
                 compact_row_seconds: float | None = None, margin: float = 0.0) -> None:
        self.path = path
        self.learned = self._load(path)
        self.overrides = {k: v for k, v in (("delete_row_seconds", delete_row_seconds),
                                            ("copy_row_seconds", copy_row_seconds),
                                            ("container_seconds", container_seconds),
                                            ("compact_row_seconds", compact_row_seconds)) if v is not None}
        self.margin = margin

    @classmethod
    def in_state_dir(cls, state_dir: Path, **settings: float | None) -> CostModel:
        margin = settings.pop("margin", None)
        return cls(Path(state_dir) / FILE_NAME, margin=margin or 0.0, **settings)

    @property
    def coefficients(self) -> Coefficients:
        """The coefficients in use: the operator's where set, else the learned ones."""
        return Coefficients(**{**asdict(self.learned), **self.overrides})

    def estimate(self, rows: int, designated: int, rows_rewritten: int) -> Estimate:
        """Estimates for a container of `rows` rows, `designated` of them to go, where the files
        holding both designated and surviving rows total `rows_rewritten` rows."""
        c = self.coefficients
        delete = c.delete_row_seconds * rows_rewritten
        copy = c.copy_row_seconds * (rows - designated) + c.container_seconds
        cheaper = "copy" if copy * (1 + self.margin) < delete else "delete"
        strategy = "drop" if designated >= rows else cheaper
        return Estimate(delete, copy, strategy)

    def compact_seconds(self, rows: int) -> float:
        """Estimated seconds to compact a container of `rows` rows (see the module docstring)."""
        c = self.coefficients
        return c.compact_row_seconds * rows + c.container_seconds

    def learn(self, strategy: str, measured: float, *, rows_rewritten: int = 0, rows_copied: int = 0) -> None:
        """Move the coefficients of `strategy` towards a run that took `measured` seconds, and save them."""
        c = self.learned
        if strategy == "delete" and rows_rewritten > 0:
            c.delete_row_seconds += LEARNING_RATE * (measured / rows_rewritten - c.delete_row_seconds)
        elif strategy in ("copy", "compact"):
            # One measurement, two unknowns: the error is shared in proportion to each term's part
            # of the estimate, so the estimate of this run moves towards the measurement.
            per_row = "copy_row_seconds" if strategy == "copy" else "compact_row_seconds"
            row_part = getattr(c, per_row) * rows_copied
            estimate = row_part + c.container_seconds
            error = LEARNING_RATE * (measured - estimate)
            if estimate > 0 and rows_copied > 0:
                setattr(c, per_row, max(0.0, getattr(c, per_row) + error * (row_part / estimate) / rows_copied))
                c.container_seconds = max(0.0, c.container_seconds + error * (c.container_seconds / estimate))
            else:
                c.container_seconds = max(0.0, c.container_seconds + error)
        else:
            return
        c.runs += 1
        self._save()

    # -- storage -----------------------------------------------------------------------------------
    @staticmethod
    def _load(path: Path) -> Coefficients:
        try:
            data = json.loads(path.read_text())
            return Coefficients(delete_row_seconds=float(data["delete_row_seconds"]),
                                copy_row_seconds=float(data["copy_row_seconds"]),
                                container_seconds=float(data["container_seconds"]), runs=int(data["runs"]),
                                # absent from the files of versions before compaction
                                compact_row_seconds=float(data.get("compact_row_seconds",
                                                                   DEFAULT_COMPACT_ROW_SECONDS)))
        except FileNotFoundError:
            return Coefficients()
        except (ValueError, TypeError, KeyError) as exc:
            log.warning("purge cost file %s is unreadable (%s): starting from the default costs", path, exc)
            return Coefficients()

    def _save(self) -> None:
        private_dir(self.path.parent)  # the state_dir: 0700 when this creates it (mqbridge.strict_modes)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self.learned), indent=2) + "\n")
        os.replace(tmp, self.path)
