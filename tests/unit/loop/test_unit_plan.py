"""`plan_unit`: what the results of one unit of work mean, decided from the results and the queue's
delivery records alone (no source, no collector, no thread)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from mqbridge.errors import PoisonLoopError
from mqbridge.loop.bookkeeping import DeliveryRecords
from mqbridge.loop.unit_plan import Failure, Unit, UnitPolicy, plan_unit
from mqbridge.message import Message, MessageResult
from mqbridge.source import BackoutMove, Landed

#: A source that commits in part and leaves moving to the loop (STOMP, memory), threshold 3.
PARTIAL = UnitPolicy(queue="orders", backout_threshold=3, backout_queue="orders.backout",
                     halt_after_failures=10, partial_commit=True, source_moves=False, moving_threshold=3,
                     ledger=False)
#: IBM MQ: a unit is committed or backed out whole; the adapter moves at BOTHRESH (5) itself.
WHOLE = UnitPolicy(queue="ORDERS", backout_threshold=0, backout_queue=None, halt_after_failures=10,
                   partial_commit=False, source_moves=True, moving_threshold=5, ledger=False)
NOTHING = DeliveryRecords()


def msg(n: int, delivery_count: int = 1) -> Message:
    return Message(f"id-{n}", f"m{n}".encode(), "src", "orders", message_type="orders",
                   delivery_count=delivery_count)


def landed(message: Message) -> MessageResult:
    return MessageResult.success(message.msg_id, bulk_id="b1", table="orders")


def unit(batch: list[Message], results: Mapping[int, MessageResult | None], *,
         moves: tuple[BackoutMove, ...] = (), failed: tuple[tuple[Message, str], ...] = (),
         deduplicated: tuple[Message, ...] = ()) -> Unit:
    """The unit of `batch` in which message i got `results[i]` (those not in `results` were not submitted)."""
    return Unit(tuple(batch), tuple((batch[i], r) for i, r in results.items()), moves=moves, failed=failed,
                deduplicated=deduplicated)


def test_a_unit_that_all_landed_is_committed_with_nothing_moved_or_returned() -> None:
    batch = [msg(i) for i in range(3)]
    plan = plan_unit(unit(batch, {i: landed(m) for i, m in enumerate(batch)}), PARTIAL, NOTHING)
    assert (plan.moves, plan.returns, plan.failures, plan.outages, plan.culprits) == ((), (), (), (), ())
    assert not plan.back_out
    assert plan.landed == tuple(Landed(m, "orders", "b1") for m in batch)
    assert plan.left == tuple(batch)


def test_a_message_failure_under_the_threshold_is_given_back_and_counted() -> None:
    # Given the second message of three failed on its own, on its second delivery (threshold 3)
    batch = [msg(0), msg(1, delivery_count=2), msg(2)]
    results = {0: landed(batch[0]), 1: MessageResult.retryable("id-1", "cannot parse"), 2: landed(batch[2])}
    plan = plan_unit(unit(batch, results), PARTIAL, NOTHING)
    # Then only it goes back, as a culprit, and its failure counts
    assert plan.returns == (batch[1],) and plan.reason == "cannot parse"
    assert plan.culprits == (batch[1],) and plan.outages == ()
    assert plan.failures == (Failure(batch[1], "cannot parse"),)
    assert plan.moves == () and not plan.back_out
    assert plan.left == (batch[0], batch[2])


def test_a_message_failure_at_the_threshold_is_moved_with_its_last_reason() -> None:
    batch = [msg(0), msg(1, delivery_count=3)]
    plan = plan_unit(unit(batch, {0: landed(batch[0]), 1: MessageResult.retryable("id-1", "cannot parse")}),
                     PARTIAL, NOTHING)
    exhausted = "delivered 3 times, backout threshold is 3; last failure: cannot parse"
    assert plan.moves == (BackoutMove(batch[1], exhausted, "orders.backout"),)
    assert plan.returns == () and plan.culprits == ()
    assert plan.failures == (Failure(batch[1], "cannot parse"),)  # counted all the same
    assert plan.left == tuple(batch)


def test_deliveries_given_back_in_an_outage_do_not_count_towards_the_threshold() -> None:
    # Given a third delivery, one of which was given back because the sink was down
    batch = [msg(1, delivery_count=3)]
    records = DeliveryRecords(outage_give_backs={"id-1": 1})
    plan = plan_unit(unit(batch, {0: MessageResult.retryable("id-1", "cannot parse")}), PARTIAL, records)
    # Then it counts as its second: given back, not moved
    assert plan.returns == tuple(batch) and plan.moves == ()


def test_a_permanent_result_is_moved_whatever_its_delivery_count() -> None:
    batch = [msg(0), msg(1)]
    plan = plan_unit(unit(batch, {0: landed(batch[0]), 1: MessageResult.permanent("id-1", "not JSON")}),
                     PARTIAL, NOTHING)
    assert plan.moves == (BackoutMove(batch[1], "not JSON", "orders.backout"),)
    assert plan.failures == () and plan.returns == ()


def test_a_preprocessor_failure_at_the_threshold_is_moved_with_the_noted_reason() -> None:
    # Given a preprocessor failure with no text of its own: the book's last reason is used
    batch = [msg(0, delivery_count=3)]
    records = DeliveryRecords(last_reasons={"id-0": "envelope: missing header"})
    plan = plan_unit(unit(batch, {}, failed=((batch[0], ""),)), PARTIAL, records)
    assert plan.moves == (BackoutMove(
        batch[0], "delivered 3 times, backout threshold is 3; last failure: envelope: missing header",
        "orders.backout"),)
    assert plan.failures == (Failure(batch[0], "", noted=True),)  # its reason was noted when it failed


def test_an_outage_gives_everything_back_without_counting_anything() -> None:
    batch = [msg(i, delivery_count=9) for i in range(3)]
    outage = {i: MessageResult.sink_outage(m.msg_id, "Spark is down") for i, m in enumerate(batch)}
    plan = plan_unit(unit(batch, outage), PARTIAL, NOTHING)
    assert plan.returns == tuple(batch) and plan.outages == tuple(batch)
    assert plan.moves == () and plan.failures == () and plan.culprits == ()  # not even at delivery 9
    assert plan.outage_only and plan.reason == "Spark is down"
    assert plan.left == ()


def test_an_outage_on_a_source_that_cannot_commit_in_part_backs_the_unit_out_uncounted() -> None:
    batch = [msg(0), msg(1)]
    results = {0: landed(batch[0]), 1: MessageResult.sink_outage("id-1", "type invoices: Spark is down")}
    plan = plan_unit(unit(batch, results), WHOLE, NOTHING)
    assert plan.back_out and plan.outage_only
    assert plan.failures == () and plan.culprits == ()
    assert plan.duplicated_risk == 1  # id-0 landed and comes back; without the ledger it lands again
    assert dataclasses.replace(plan, policy=dataclasses.replace(WHOLE, ledger=True)).duplicated_risk == 0


def test_a_message_failure_on_a_whole_unit_source_backs_the_unit_out_with_its_culprit() -> None:
    # Given IBM MQ (the adapter moves at BOTHRESH): the loop never moves, even at a high count
    batch = [msg(0), msg(1, delivery_count=7)]
    plan = plan_unit(unit(batch, {0: landed(batch[0]), 1: MessageResult.retryable("id-1", "bad row")}),
                     WHOLE, NOTHING)
    assert plan.back_out and not plan.outage_only
    assert plan.culprits == (batch[1],) and plan.moves == ()
    assert plan.failures == (Failure(batch[1], "bad row"),)


def test_an_in_doubt_unit_redelivered_is_committed_without_landing_what_the_ledger_knows() -> None:
    # Given a unit whose commit was in doubt, delivered again: the ledger knows two of its three
    # messages as landed (they were not submitted again); the third lands now
    batch = [msg(0, delivery_count=2), msg(1, delivery_count=2), msg(2, delivery_count=2)]
    policy = dataclasses.replace(WHOLE, ledger=True)
    plan = plan_unit(unit(batch, {2: landed(batch[2])}, deduplicated=(batch[0], batch[1])), policy, NOTHING)
    # Then the whole unit is committed, nothing moved or returned
    assert not plan.back_out and plan.returns == () and plan.moves == () and plan.failures == ()
    assert plan.landed == (Landed(batch[2], "orders", "b1"),)  # where the others are is the ledger's to say
    assert plan.left == tuple(batch)


def test_a_delivery_without_a_result_counts_as_a_retryable_failure() -> None:
    batch = [msg(0), msg(1)]
    plan = plan_unit(unit(batch, {0: landed(batch[0]), 1: None}), PARTIAL, NOTHING)
    assert plan.returns == (batch[1],) and plan.reason == "no result"
    assert plan.failures == (Failure(batch[1], "no result"),)


def test_a_message_that_can_never_land_halts_the_listener_after_halt_after_failures() -> None:
    # Given no backout threshold and no backout queue: nothing will ever move a failing message
    policy = dataclasses.replace(PARTIAL, backout_threshold=0, backout_queue=None, moving_threshold=0,
                                 halt_after_failures=3)
    batch = [msg(1, delivery_count=50)]
    plan = plan_unit(unit(batch, {0: MessageResult.retryable("id-1", "bad row")}), policy, NOTHING)
    [failure] = plan.failures
    assert plan.returns == tuple(batch) and plan.moves == ()
    # Then its third failure (as the book counts them) halts the listener, not its second
    assert plan.halt(failure, 2) is None
    halt = plan.halt(failure, 3)
    assert isinstance(halt, PoisonLoopError)
    assert "message id-1 on orders failed 3 times" in str(halt) and "backout_threshold is 0" in str(halt)
    assert "Last failure: bad row" in str(halt)


def test_a_threshold_that_will_move_the_message_never_halts() -> None:
    batch = [msg(1)]
    plan = plan_unit(unit(batch, {0: MessageResult.retryable("id-1", "bad row")}), WHOLE, NOTHING)
    assert plan.halt(plan.failures[0], 1000) is None  # BOTHRESH 5 moves it first


def test_moves_with_nowhere_to_go_are_given_back_as_failures_that_halt() -> None:
    # Given a permanent result, a listener without backout queue and a source that moves nothing
    policy = dataclasses.replace(PARTIAL, backout_queue=None, backout_threshold=0, moving_threshold=0,
                                 halt_after_failures=1)
    batch = [msg(0), msg(1)]
    early = BackoutMove(batch[0], "no identity header", None)  # decided before preprocessing
    results = {1: MessageResult.permanent("id-1", "not JSON")}
    plan = plan_unit(unit(batch, results, moves=(early,)), policy, NOTHING)
    # Then both go back, each as a counted failure saying why it was not moved
    suffix = " (it cannot be moved aside: the listener has no backout_queue)"
    assert plan.moves == ()
    assert plan.returns == tuple(batch)
    assert plan.failures == (Failure(batch[0], "no identity header" + suffix),
                             Failure(batch[1], "not JSON" + suffix))
    assert isinstance(plan.halt(plan.failures[1], 1), PoisonLoopError)


def test_planning_reads_its_inputs_only() -> None:
    batch = [msg(0), msg(1, delivery_count=3)]
    the_unit = unit(batch, {0: landed(batch[0]), 1: MessageResult.retryable("id-1", "x")})
    assert plan_unit(the_unit, PARTIAL, NOTHING) == plan_unit(the_unit, PARTIAL, NOTHING)
    assert the_unit.moves == ()
