"""Which bulk a snapshot of an Iceberg table published: one reading of a snapshot's summary for Spark
(`mqbridge.landing.iceberg`, recovery) and for pyiceberg (`mqbridge.landing.iceberg_read`: `where`,
`ledger --verify`, `--abandon`, the ledger's rebuild).

Why it is not just the summary's bulk id: a bulk's append is *staged* by Iceberg's write-audit-publish
(`iceberg.stage`: a snapshot outside the table's lineage whose summary carries the bulk's id, its
transaction, and `wap.id`, the bulk's id again) and then *published* by a cherry-pick
(`iceberg.publish`). A publish onto the staged snapshot's own parent is a fast-forward: the staged
snapshot itself joins the lineage, its summary as written. A publish onto a newer snapshot adds a new
one, whose summary names only `published-wap-id` and `source-snapshot-id`; the bulk is then the
source's (measured: tests/integration/test_iceberg_wap.py). A fence (`iceberg.fence`) is an empty append
published the same way under a bulk's WAP id, `FENCE_PROPERTY` in its summary. An append made before
the bridge staged its appends carries the bulk's id in its own summary, and no `wap.id`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from mqbridge.config.iceberg import APP_ID_PROPERTY, BULK_ID_PROPERTY, FENCE_PROPERTY, VERSION_PROPERTY

#: Iceberg's summary keys of a cherry-picked publish (`SnapshotSummary`).
PUBLISHED_WAP_ID = "published-wap-id"
SOURCE_SNAPSHOT_ID = "source-snapshot-id"
#: The summary key of a staged append's WAP id (`SnapshotSummary.STAGED_WAP_ID_PROP`).
STAGED_WAP_ID = "wap.id"


@dataclass(frozen=True)
class Publication:
    """What one snapshot of a table's lineage published."""

    bulk_id: str | None  # the bulk whose rows it added; None: not a bulk's (a fence, a purge, a compaction)
    app_id: str | None  # APP_ID_PROPERTY of the bulk's append: the ledger's TableTransaction
    version: int | None  # VERSION_PROPERTY
    fenced: str | None = None  # the bulk id a fence was published under


def publication(summary: Mapping[str, str], summaries: Mapping[int, Mapping[str, str]]) -> Publication:
    """What the snapshot whose summary is `summary` published, `summaries` being every snapshot's
    summary the table's metadata keeps, by id (a cherry-pick's source is among them until it expires;
    then the WAP id names the bulk, and a publish that added no rows was a fence)."""
    source = summary
    published = summary.get(PUBLISHED_WAP_ID)
    if published is not None:
        source_id = summary.get(SOURCE_SNAPSHOT_ID, "")
        picked = summaries.get(int(source_id)) if source_id.lstrip("-").isdigit() else None
        if picked is None:
            if summary.get("added-records", "0") == "0":
                return Publication(None, None, None, published)
            return Publication(published, None, None)
        source = picked
    fenced = source.get(FENCE_PROPERTY)
    if fenced is not None:
        return Publication(None, None, None, fenced)
    version = source.get(VERSION_PROPERTY)
    return Publication(source.get(BULK_ID_PROPERTY), source.get(APP_ID_PROPERTY),
                       int(version) if version is not None and version.lstrip("-").isdigit() else None)


__all__ = ["PUBLISHED_WAP_ID", "SOURCE_SNAPSHOT_ID", "STAGED_WAP_ID", "Publication", "publication"]
