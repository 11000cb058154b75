"""Reply destinations allow-listed (mqbridge.outbound.reply_to): the patterns' rules for STOMP and IBM MQ,
the configuration key, and the count a refused result leaves in the counters and /metrics."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from mqbridge.config import parse_config
from mqbridge.drivers import open_source
from mqbridge.errors import ConfigError
from mqbridge.message import Message
from mqbridge.monitoring.metrics import BridgeMetrics
from mqbridge.outbound.reply_to import FirstTimes, ReplyAllowList
from mqbridge.source import Confirmations, Landed, QueueShared, SourceContext
from tests.support.configs import orders
from tests.support.memory import RecordingExecutor, memory_app, memory_config


def test_stomp_default_allows_every_destination_of_the_broker() -> None:
    allow = ReplyAllowList(None, listener="amq:/queue/in")
    assert all(allow.allows(d) for d in ("/queue/results", "/topic/x", "/temp-queue/abc", "anything"))


def test_stomp_patterns_are_case_sensitive_globs() -> None:
    allow = ReplyAllowList(["/queue/results.*", "/temp-queue/*"], listener="amq:/queue/in")
    assert allow.allows("/queue/results.eu") and allow.allows("/temp-queue/r1")
    assert not allow.allows("/queue/Results.eu") and not allow.allows("/queue/audit")
    assert not ReplyAllowList([], listener="amq:/queue/in").allows("/queue/results.eu")  # []: none


@pytest.mark.parametrize(("patterns", "queue", "qmgr", "allowed"), [
    (None, "ANY", "", True),  # blank ReplyToQMgr: the connected queue manager
    (None, "ANY", "QM1", True),
    (None, "ANY", "QM1   ", True),  # MQCHAR48, blank-padded
    (None, "ANY", "QM2", False),
    (["RESULTS.*"], "RESULTS.A", "", True),
    (["RESULTS.*"], "RESULTS.A", "QM2", False),  # a queue pattern never opens another queue manager
    (["RESULTS.*"], "AUDIT", "", False),
    (["*/RESULTS.*"], "RESULTS.A", "QM2", True),
    (["QM2/*"], "ANY", "QM2", True),
    (["QM2/*"], "ANY", "", False),
    (["QM1/AUDIT"], "AUDIT", "", True),  # blank is QM1, so "QM1/AUDIT" names it
])
def test_mq_patterns_match_the_queue_here_or_qmgr_slash_queue(patterns: Sequence[str] | None, queue: str, qmgr: str,
                                                              allowed: bool) -> None:
    assert ReplyAllowList(patterns, listener="qm:ORDERS", queue_manager="QM1").allows_mq(queue, qmgr) is allowed


def test_a_refusal_is_logged_once_per_destination_across_connections(caplog: pytest.LogCaptureFixture) -> None:
    shared = FirstTimes()
    first, second = (ReplyAllowList(["/queue/ok"], listener="amq:/queue/in", refusals=shared) for _ in range(2))
    with caplog.at_level(logging.WARNING, logger="mqbridge.reply_to"):
        for allow in (first, second, first):
            allow.refused("/queue/evil", "results of /queue/in")
        second.refused("/queue/other", "results of /queue/in")
    assert [r.getMessage().split(" is not")[0] for r in caplog.records] == [
        "amq:/queue/in: results of /queue/in not sent: reply-to /queue/evil",
        "amq:/queue/in: results of /queue/in not sent: reply-to /queue/other"]


# -- the configuration key --------------------------------------------------------------------
def test_reply_to_allow_is_for_stomp_results_and_mq_reports() -> None:
    stomp = orders(listener='confirm = "reply-to"\nreply_to_allow = ["/queue/results.*"]').parse()
    assert stomp.listeners[0].reply_to_allow == ["/queue/results.*"]
    assert orders().parse().listeners[0].reply_to_allow is None
    with pytest.raises(ConfigError, match=r'listeners\[0\]\.reply_to_allow: only used with confirm = "reply-to"'):
        orders(listener='reply_to_allow = ["/queue/results.*"]').parse()
    with pytest.raises(ConfigError, match=r"listeners\[0\]\.reply_to_allow\[0\]"):
        orders(listener='confirm = "reply-to"\nreply_to_allow = [""]').parse()
    mq = parse_config('[types.orders]\n[sources.qm]\nkind = "mq"\nqueue_manager = "QM1"\nconn_name = "h(1414)"\n'
                      '[[listeners]]\nsource = "qm"\nqueue = "ORDERS"\nmessage_type = "orders"\n'
                      'reply_to_allow = ["RESULTS.*", "QM2/*"]\n', "bridge.toml")
    assert mq.listeners[0].reply_to_allow == ["RESULTS.*", "QM2/*"]


# -- counted where the other results are --------------------------------------------------------
class RefusingSource:
    """A memory source whose every landed message asked for a result it may not have."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def commit(self, moves: Sequence[Any] = (), returns: Sequence[Message] = (),
               landed: Sequence[Landed] = ()) -> Confirmations:
        self._inner.commit(moves, returns, landed)
        return Confirmations(not_allowed=len(landed))


def test_results_not_allowed_are_counted_per_listener_and_shown_in_metrics() -> None:
    cfg, broker = memory_config()
    for n in range(5):
        broker.put("orders", f"m{n}".encode())
    app = memory_app(cfg, RecordingExecutor(),
                     source_factory=lambda ctx: RefusingSource(open_source(ctx)))
    assert app.run(until_idle=0.3) == 0
    counters = app.bridge.counters
    assert counters.total("results_not_allowed") == 5 and counters.total("results_sent") == 0
    registry = CollectorRegistry()
    registry.register(BridgeMetrics(counters))
    text = generate_latest(registry).decode()
    assert "# HELP mqbridge_results_not_allowed_total Results not sent because the reply-to is not allowed" in text
    assert 'mqbridge_results_not_allowed_total{listener="mem:orders",queue="orders"} 5.0' in text


def test_a_context_gives_its_listener_patterns_and_the_queues_shared_refusals() -> None:
    cfg = orders(listener='confirm = "reply-to"\nreply_to_allow = ["/queue/r.*"]').parse()
    shared = QueueShared()
    context = SourceContext(source_name="amq", source=cfg.sources["amq"], listener=cfg.listeners[0],
                            bridge_name="b", thread_index=1, shared=shared)
    allow = context.reply_allow()
    assert allow.patterns == ("/queue/r.*",) and allow.refusals is shared.refused_replies
    assert allow.listener == "amq:/queue/orders"
