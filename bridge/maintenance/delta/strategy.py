"""The strategy of one Delta partition's purge: a pure choice from what the partition holds and the
learned cost model (`mqbridge.maintenance.engine.costs`), the same model the Parquet purge learns.

    every row designated      → drop: `DELETE ... WHERE put_date = d AND <designation>`; every file
                                of the partition goes as a whole, none is rewritten
    otherwise, the cheaper of → delete: `DELETE ... WHERE put_date = d AND <designation>`
                                copy:   the partition replaced by its survivors in one commit

Delete's cost depends on the table. Without deletion vectors Delta rewrites every file holding a
designated row with its surviving rows (copy-on-write: the rows of those files, as the Parquet
purge's delete). With deletion vectors (`delta.enableDeletionVectors`) it rewrites nothing and writes
a small vector per touched file: cheap now, estimated by the designated rows alone; readers then skip
the deleted rows on every read until the files are rewritten (the compaction's OPTIMIZE rewrites a
file once enough of it is deleted, `spark.databricks.delta.optimize.maxDeletedRowsRatio`). Copy
rewrites the survivors into few files sorted by put_timestamp, whatever the table.
"""

from __future__ import annotations

from mqbridge.maintenance.engine.costs import CostModel, Estimate

#: The strategies a caller may force (`mqbridge purge --strategy`); "drop" is never forced, it is chosen.
FORCED = ("auto", "delete", "copy")


def delete_rows(designated: int, rows_rewritten: int, *, deletion_vectors: bool) -> int:
    """The rows delete's cost is counted in: the designated rows with deletion vectors, else the rows
    of the files that hold designated and surviving rows (see the module docstring)."""
    return designated if deletion_vectors else rows_rewritten


def choose(model: CostModel, rows: int, designated: int, rows_rewritten: int, *, deletion_vectors: bool,
           forced: str = "auto") -> Estimate:
    """The estimate of one partition of `rows` rows, `designated` of them to go, where the files holding
    designated and surviving rows total `rows_rewritten` rows; its strategy is drop when every row is
    designated, else `forced` unless "auto", else the cheaper by the model (copy only past its margin)."""
    if forced not in FORCED:
        raise ValueError(f"strategy {forced!r}: one of {', '.join(FORCED)}")
    estimate = model.estimate(rows, designated, delete_rows(designated, rows_rewritten,
                                                            deletion_vectors=deletion_vectors))
    if forced != "auto" and estimate.strategy != "drop":
        return Estimate(estimate.delete_seconds, estimate.copy_seconds, forced)
    return estimate
