"""Claims and fencing in the landing ledger shared by several bridges (`Ledger.prepare`'s refusal of an
identity another prepared bulk holds, `Landing`'s `BulkFencedError`): a bridge that stalled or was cut
off past its lease, and whose bulk another bridge decided meanwhile, can never publish it afterwards."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqbridge.counters import Counters
from mqbridge.errors import BulkFencedError, IdentityClaimedError
from mqbridge.landing.landing import Landing
from mqbridge.landing.ledger import Ledger, SqliteLedger, TableTransaction


def _other(ledger: Ledger) -> SqliteLedger:
    """Another bridge's handle on the same ledger."""
    return SqliteLedger.open(Path(str(ledger.path)), owner="other-host/1:42:1.00")


def test_a_bulk_another_bridge_fenced_while_this_one_stalled_is_never_published(ledger: Ledger,
                                                                                 tmp_path: Path) -> None:
    # Given this bridge's bulk, prepared, whose write stalls (a frozen VM, a long GC) past its lease,
    # while another bridge fences its table version and forgets it (`BulksInDoubt._settle` there)
    other = _other(ledger)
    counters = Counters()
    landing = Landing(ledger=ledger, owner=ledger.owner, counters=counters, dedupe_window=3600, warehouse=tmp_path)
    written: list[TableTransaction] = []

    def write(transaction: TableTransaction) -> None:
        [bulk] = other.prepared_holding(["m1"])
        assert bulk.transaction == transaction
        other.forget(bulk.bulk_id)  # the other bridge decided: not committed, version fenced
        written.append(transaction)  # then this write resumes: the table skips the fenced version

    # When it resumes and finishes: it is told it lost the bulk, and records nothing
    with pytest.raises(BulkFencedError, match="b1 of table orders was decided by another process"):
        landing.commit("b1", "orders", ["m1", "m2"], write)
    assert len(written) == 1 and ledger.state_of("b1") is None and ledger.published(["m1", "m2"]) == set()
    assert counters.total("ledger_bulks_fenced") == 1
    # And the messages, landed by the other bridge now, are refused to it no more
    other.prepare("b2", "orders", [], ["m1", "m2"])
    other.mark_published("b2")
    assert ledger.published(["m1", "m2"]) == {"m1", "m2"}
    landing.close()
    other.close()


def test_a_bulk_another_bridge_took_over_and_fenced_but_not_yet_forgot_is_never_recorded_published(
        ledger: Ledger, tmp_path: Path) -> None:
    # Given this bridge's bulk, prepared, whose write stalls past its lease, while another bridge takes it
    # over to decide it (`BulksInDoubt._settle` there: `take_over`, then the fence) and has not forgotten it yet
    # (it is deciding, or died before it could): the bulk is still prepared in the ledger
    other = _other(ledger)
    counters = Counters()
    landing = Landing(ledger=ledger, owner=ledger.owner, counters=counters, dedupe_window=3600, warehouse=tmp_path)

    def write(transaction: TableTransaction) -> None:
        [bulk] = other.prepared_holding(["m1"])
        assert other.take_over(bulk.bulk_id)  # the other bridge's, then its fence of the version
        # this write resumes: the table skips the fenced version, the write returns as if committed

    # When it resumes and finishes: it is told it lost the bulk and records nothing, although the ledger
    # still holds the bulk prepared (before take_over, it was recorded published: its messages committed
    # at their source, their rows in no table)
    with pytest.raises(BulkFencedError, match="b1 was taken over by other-host/1:42:1.00"):
        landing.commit("b1", "orders", ["m1", "m2"], write)
    assert ledger.state_of("b1") == "prepared" and ledger.published(["m1", "m2"]) == set()
    assert counters.total("ledger_bulks_fenced") == 1
    # ... and the other bridge decides it as it finds the table: a second take-over finds it decided
    assert ledger.in_progress()[0].owner == "other-host/1:42:1.00"
    other.forget("b1")
    assert not other.take_over("b1")
    landing.close()
    other.close()


def test_a_bulk_another_bridge_published_while_this_one_could_not_counts_as_landed(ledger: Ledger,
                                                                                  tmp_path: Path) -> None:
    # Given this bridge's prepared bulk whose publication fails again and again, while another bridge
    # finds the owner's lease expired and publishes it (a roll-forward)
    other = _other(ledger)
    landing = Landing(ledger=ledger, owner=ledger.owner, counters=Counters(), dedupe_window=3600, warehouse=tmp_path)
    attempts: list[int] = []

    def write(transaction: TableTransaction) -> None:
        return None

    def publish() -> None:
        attempts.append(1)
        if len(attempts) == 1:
            other.mark_published("b1")
        raise OSError("the disk is gone")

    ledger.prepare("b1", "orders", [], ["m1"], transaction=TableTransaction("app", 1))
    # When its publication is retried: it stops once the ledger says published, the bulk landed once
    landing._until_published("b1", "orders", publish, transactional=False)
    assert attempts == [1] and ledger.published(["m1"]) == {"m1"}
    landing.close()
    other.close()


def test_a_bulk_holding_an_identity_another_bridge_prepared_is_refused_before_its_write(ledger: Ledger,
                                                                                        tmp_path: Path) -> None:
    # Given another bridge's prepared bulk holding m1 (it read m1 before its connection was lost)
    other = _other(ledger)
    other.heartbeat()
    other.prepare("theirs", "orders", [], ["m1"], transaction=TableTransaction("their-app", 3))
    landing = Landing(ledger=ledger, owner=ledger.owner, counters=Counters(), dedupe_window=3600, warehouse=tmp_path)
    landing.in_doubt.settle = lambda bulk: False  # never reached: the owner is alive
    # Then this bridge's bulk that holds m1 too is refused before anything is written
    called: list[TableTransaction] = []
    with pytest.raises(IdentityClaimedError, match="in bulk theirs of other-host/1:42:1.00, prepared") as refused:
        landing.commit("mine", "orders", ["m0", "m1"], called.append)
    assert refused.value.identities == ["m1"]
    assert called == [] and ledger.state_of("mine") is None
    landing.close()
    other.close()


def test_a_bridge_whose_ledger_other_hosts_share_looks_its_version_up_before_every_commit(
        ledger: Ledger, tmp_path: Path) -> None:
    # A fence from another host may come before this process's first attempt (it only stalled): its
    # commits look their version up in the log (`delta_commit._in_log`: the commits since its previous
    # version of the table), at a cost only there
    seen: list[TableTransaction] = []
    landing = Landing(ledger=ledger, owner=ledger.owner, counters=Counters(), dedupe_window=3600, warehouse=tmp_path)
    for shared in (False, True):
        ledger.shared_across_hosts = shared  # PostgresLedger's is True
        landing.commit(f"b-{shared}", "orders", [f"m-{shared}"], seen.append)
    landing.close()
    assert [t.check_fence for t in seen] == [False, True]
    assert seen[1] == TableTransaction(seen[1].app_id, seen[1].version)  # the flag is not part of its identity
