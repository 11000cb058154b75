"""Which bulk a snapshot published (`mqbridge.landing.iceberg_snapshots.publication`), on summaries shaped
as Iceberg 1.12 writes them (tests/integration/test_iceberg_wap.py shows them on a real table): an append of
before write-audit-publish, a staged append fast-forwarded into the lineage, a cherry-pick on top of newer
snapshots (the bulk read from its source), a fence either way, and a cherry-pick whose source expired."""

from __future__ import annotations

from mqbridge.config.iceberg import APP_ID_PROPERTY, BULK_ID_PROPERTY, FENCE_PROPERTY, VERSION_PROPERTY
from mqbridge.landing.iceberg_snapshots import Publication, publication

STAGED = {"wap.id": "b-1", BULK_ID_PROPERTY: "b-1", APP_ID_PROPERTY: "mqbridge:h:1:2.00", VERSION_PROPERTY: "7",
          "added-records": "3"}
FENCE = {"wap.id": "b-2", FENCE_PROPERTY: "b-2"}
SUMMARIES = {11: STAGED, 12: FENCE}


def test_an_append_of_before_staging_and_a_fast_forwarded_stage_are_read_from_their_own_summary() -> None:
    before = {BULK_ID_PROPERTY: "b-0", APP_ID_PROPERTY: "a", VERSION_PROPERTY: "1", "added-records": "1"}
    assert publication(before, {}) == Publication("b-0", "a", 1)
    assert publication(STAGED, SUMMARIES) == Publication("b-1", "mqbridge:h:1:2.00", 7)


def test_a_cherry_pick_on_top_is_its_sources_bulk_and_a_fence_is_no_bulk() -> None:
    picked = {"published-wap-id": "b-1", "source-snapshot-id": "11", "added-records": "3"}
    assert publication(picked, SUMMARIES) == Publication("b-1", "mqbridge:h:1:2.00", 7)
    fence_on_top = {"published-wap-id": "b-2", "source-snapshot-id": "12"}
    assert publication(fence_on_top, SUMMARIES) == Publication(None, None, None, "b-2")
    assert publication(FENCE, SUMMARIES) == Publication(None, None, None, "b-2")


def test_a_cherry_pick_whose_source_expired_is_told_by_its_wap_id_and_its_rows() -> None:
    assert publication({"published-wap-id": "b-3", "source-snapshot-id": "99", "added-records": "4"}, SUMMARIES) == (
        Publication("b-3", None, None))
    assert publication({"published-wap-id": "b-4", "source-snapshot-id": "98"}, SUMMARIES) == (
        Publication(None, None, None, "b-4"))


def test_a_purge_or_a_compaction_publishes_no_bulk() -> None:
    assert publication({"added-records": "0", "deleted-records": "5"}, SUMMARIES) == Publication(None, None, None)
