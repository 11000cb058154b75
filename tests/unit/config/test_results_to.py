"""`[types.X] results_to`: accepted where the type's listeners can send there, refused with an error
naming the key and the reason everywhere else."""

from __future__ import annotations

import pytest

from tests.unit.config.texts import LISTENER, MINIMAL, SOURCE, error, parse

MQ = """
[types.orders]
results_to = "{dest}"
[sources.qm1]
kind = "mq"
queue_manager = "QM1"
conn_name = "mqhost(1414)"
[[listeners]]
source = "qm1"
queue = "ORDERS.IN"
message_type = "orders"
"""


def stomp(dest: str, source: str = 'kind = "stomp"', extra: str = "") -> str:
    return MINIMAL.replace("[types.orders]", f'[types.orders]\nresults_to = "{dest}"').replace(
        'kind = "stomp"', source) + extra


def test_results_to_is_unset_by_default_and_kept_as_written() -> None:
    assert parse(MINIMAL).types["orders"].results_to is None
    assert parse(stomp("/queue/audit")).types["orders"].results_to == "/queue/audit"
    assert parse(stomp("/exchange/audit/orders", 'kind = "stomp"\nbroker = "rabbitmq"')).types[
        "orders"].results_to == "/exchange/audit/orders"
    assert parse(MQ.format(dest="AUDIT.RESULTS")).types["orders"].results_to == "AUDIT.RESULTS"


@pytest.mark.parametrize(("text", "expected"), [
    (stomp("AUDIT.RESULTS"), "types.orders.results_to: listeners[0] (amq:/queue/orders): a STOMP destination "
                             "starts with /queue/"),
    (stomp("/temp-queue/audit"), "types.orders.results_to: listeners[0] (amq:/queue/orders): '/temp-queue/audit' "
                                 "is not allowed: a temporary or reply destination lives only as long as one"),
    (stomp("/reply-queue/x", 'kind = "stomp"\nbroker = "rabbitmq"'), "'/reply-queue/x' is not allowed"),
    (stomp("/queue/audit", 'kind = "stomp"\ncommit_mode = "receipted"'),
     'types.orders.results_to: listeners[0] (amq:/queue/orders): needs commit_mode = "transactional"'),
    (stomp("/queue/audit", 'kind = "memory"'), "types.orders.results_to: listeners[0] (amq:/queue/orders): a "
                                               "memory source sends no results"),
    (MQ.format(dest="/queue/audit"), "types.orders.results_to: listeners[0] (qm1:ORDERS.IN): '/queue/audit' looks "
                                     "like a STOMP destination"),
    (MQ.format(dest="A" * 49), "is not an IBM MQ queue name (1 to 48 characters"),
    (MQ.format(dest="AUDIT RESULTS"), "'AUDIT RESULTS' is not an IBM MQ queue name"),
    (stomp("/queue/orders.backout"), "types.orders.results_to: '/queue/orders.backout' is the backout queue of "
                                     "listeners[0]: results and poison messages would mix"),
    (stomp("/queue/orders"), "types.orders.results_to: listeners[0] consumes '/queue/orders' as type 'orders', which "
                             "has results_to too: each result would produce another result (a loop)"),
    (stomp(""), "types.orders.results_to: "),
])
def test_a_destination_the_types_listeners_cannot_send_to_is_refused(text: str, expected: str) -> None:
    assert expected in error(text)


def test_a_type_fed_by_stomp_and_ibm_mq_listeners_cannot_have_one_destination_for_both() -> None:
    text = MQ.format(dest="/queue/audit") + SOURCE + LISTENER
    message = error(text)
    assert "listeners[0] (qm1:ORDERS.IN): '/queue/audit' looks like a STOMP destination" in message
    assert "listeners[1]" not in message  # the STOMP listener can send there


def test_a_results_queue_may_be_landed_by_a_type_that_sends_no_results() -> None:
    # Given the results of orders landed as type audit (which has no results_to): no loop
    text = stomp("/queue/audit") + """
[types.audit]
[[listeners]]
source = "amq"
queue = "/queue/audit"
message_type = "audit"
backout_queue = "/queue/audit.backout"
"""
    assert parse(text).types["orders"].results_to == "/queue/audit"
    looped = text.replace("[types.audit]", '[types.audit]\nresults_to = "/queue/orders.audit"')
    assert "listeners[1] consumes '/queue/audit' as type 'audit', which has results_to too" in error(looped)


def test_results_are_accepted_on_rabbitmq_whose_commits_are_receipted() -> None:
    # Given RabbitMQ, where commit_mode is "receipted" (a transaction is not applied atomically there)
    rabbit = stomp("/queue/audit", 'kind = "stomp"\nbroker = "rabbitmq"', "confirm = 'reply-to'\n")
    # Then results to results_to and to the reply-to are accepted: confirmed before the ACK (at-least-once)
    cfg = parse(rabbit)
    assert cfg.sources["amq"].commit_mode == "receipted"  # type: ignore[union-attr]
    assert (cfg.types["orders"].results_to, cfg.listeners[0].confirm) == ("/queue/audit", "reply-to")
