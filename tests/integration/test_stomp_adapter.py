"""What the STOMP adapter promises beyond the source contract, on the real brokers: bounded waits,
a refused CONNECT or SUBSCRIBE told apart from an outage, ERROR frames failing the unit, a refused
move halting the listener, and messages refused at the edge going to the backout queue once."""

from __future__ import annotations

import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from mqbridge.config import StompSourceConfig
from mqbridge.errors import BackoutFailedError, InDoubtError, SourceConnectionError, SourceRefusedError
from mqbridge.listeners.stomp import StompSource
from mqbridge.records import DeliveryTracker
from mqbridge.source import BackoutMove
from mqbridge.supervision.decision import Decision, decide
from mqbridge.tracing.backout_log import BackoutLog
from tests.support.amq import AmqClient, unique_queue
from tests.support.exactly_once import RABBIT_SOURCE, private_activemq
from tests.support.processes import mqbridge, stomp_config
from tests.support.sources import receive
from tests.support.stomp_client import StompClient
from tests.support.tcpproxy import TcpProxy

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

RABBIT = {"user": "guest", "password": SecretStr("guest"), "allow_plaintext_password": True}


def source(address: tuple[str, int], queue: str, *, backout: str | None = None, backout_log: BackoutLog | None = None,
           **settings: Any) -> StompSource:
    cfg = StompSourceConfig(host=address[0], port=address[1], heartbeat=2.0, **settings)
    return StompSource("src1", cfg, queue, prefetch=10, tracker=DeliveryTracker(), backout_queue=backout,
                       backout_log=backout_log)


@pytest.fixture
def rabbit(rabbitmq: tuple[str, int]) -> Iterator[StompClient]:
    yield StompClient(rabbitmq, {**RABBIT, "vhost": "/"}, browser=False)


# -- bounded waits ----------------------------------------------------------------------------
def test_a_broker_that_accepts_tcp_but_never_answers_connect_times_out() -> None:
    # Given a socket that listens (the kernel completes the TCP handshake) and never says a word
    with socket.create_server(("127.0.0.1", 0)) as silent:
        src = source(silent.getsockname(), "/queue/never", connect_timeout=1.0)
        # When the adapter connects, Then it gives up after connect_timeout, as an outage
        with pytest.raises(SourceConnectionError, match=r"no answer to CONNECT within 1s \(connect_timeout\)"):
            src.connect()
        src.close()


def test_a_port_nobody_listens_on_is_an_outage_with_a_clear_reason() -> None:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]  # free once closed
    src = source(("127.0.0.1", port), "/queue/never", connect_timeout=1.0)
    with pytest.raises(SourceConnectionError, match=rf"^cannot connect to STOMP broker 127.0.0.1:{port} "
                                                    r"\(source 'src1'\): no TCP connection within 1s "
                                                    r"\(refused or unreachable\)$"):
        src.connect()


def test_a_receipt_wait_ends_when_the_connection_drops(activemq: tuple[str, int], amq: AmqClient) -> None:
    # Given a unit of work, a receipt timeout far beyond the test's own limit, and a connection
    # that is cut when the COMMIT is sent (the broker never sees it)
    q = unique_queue("stomp-drop")
    amq.put_many(q, [b"one", b"two"])
    proxy = TcpProxy(activemq)
    try:
        src = source(("127.0.0.1", proxy.port), q, receipt_timeout=3600.0)
        src.connect()
        receive(src, 2)
        proxy.cut_at(b"COMMIT\n", forward=False)
        # When it commits, Then the wait ends with the connection, in doubt, and nothing is lost
        with pytest.raises(InDoubtError, match="the connection dropped"):
            src.commit()
        src.close()
    finally:
        proxy.close()
    assert sorted(f.body for f in amq.drain(q)) == [b"one", b"two"]


def test_a_connection_that_goes_quiet_right_after_a_frame_stays_up(activemq: tuple[str, int],
                                                                   amq: AmqClient) -> None:
    # Given a connection with 2 s heart-beats that gets a message just after ActiveMQ's second
    # heart-beat check (4.3 s after connecting; the grace stomp.py gives the first heart-beat is over)
    # and commits it: ActiveMQ then skips its next heart-beat, the next comes about 3.7 s after that
    q = unique_queue("quiet")
    src = source(activemq, q)
    src.connect()
    try:
        time.sleep(4.3)
        amq.put(q, b"one")
        receive(src, 1)
        src.commit()
        # When it stays quiet for 3 heart-beat periods
        time.sleep(6.5)
        # Then it is still connected: an empty receive, not a lost connection
        assert src.receive(0.2) is None
    finally:
        src.close()


# -- configuration errors are not outages ------------------------------------------------------
@pytest.mark.parametrize(("settings", "reason"), [
    ({**RABBIT, "vhost": "no-such-vhost"}, "Bad CONNECT: Virtual host 'no-such-vhost' access denied"),
    ({**RABBIT, "password": SecretStr("wrong")}, "Bad CONNECT: Access refused for user 'guest'"),
], ids=["unknown-vhost", "bad-password"])
def test_rabbitmq_refusing_connect_halts_the_listener_with_its_reason(
        rabbitmq: tuple[str, int], settings: dict[str, Any], reason: str) -> None:
    src = source(rabbitmq, "/queue/refused", broker="rabbitmq", **settings)
    with pytest.raises(SourceRefusedError) as info:
        src.connect()
    # one line naming the source key and the broker's own words; the supervisor halts, not restarts
    assert str(info.value) == f"STOMP broker 127.0.0.1:{rabbitmq[1]} (source 'src1') refused CONNECT: {reason}"
    assert decide(info.value) is Decision.HALT
    assert "wrong" not in str(info.value)


def test_rabbitmq_without_vhost_uses_the_default_virtual_host(rabbitmq: tuple[str, int], rabbit: StompClient) -> None:
    q = f"/queue/test.vhost.{uuid.uuid4().hex[:8]}"
    rabbit.put_many(q, [b"one"])
    src = source(rabbitmq, q, broker="rabbitmq", **RABBIT)  # no vhost: "/" (never the host name)
    src.connect()
    [got] = receive(src, 1)
    assert got.body == b"one"
    src.commit()
    src.close()


def test_rabbitmq_refusing_the_subscription_halts_the_listener(rabbitmq: tuple[str, int]) -> None:
    # Given a user that may log in but not read (or declare) anything
    user = f"mqbridge-noread-{uuid.uuid4().hex[:6]}"
    ctl = ["rabbitmqctl", "-q", "-n", "mqbridge-test@localhost"]
    subprocess.run([*ctl, "add_user", user, "pw"], check=True, capture_output=True)
    try:
        subprocess.run([*ctl, "set_permissions", "-p", "/", user, "^$", "^$", "^$"], check=True, capture_output=True)
        src = source(rabbitmq, "/queue/test.noread", broker="rabbitmq", user=user, password=SecretStr("pw"),
                     allow_plaintext_password=True)
        with pytest.raises(SourceRefusedError, match=r"\(source 'src1'\) refused the subscription to "
                                                     r"/queue/test.noread: access_refused"):
            src.connect()
        src.close()
    finally:
        subprocess.run([*ctl, "delete_user", user], check=False, capture_output=True)


# -- ERROR frames and refused moves -------------------------------------------------------------
@pytest.mark.parametrize("commit_mode", ["transactional", "receipted"])
def test_an_error_frame_during_the_unit_fails_it_and_gives_it_back(
        activemq: tuple[str, int], amq: AmqClient, commit_mode: str) -> None:
    q = unique_queue("stomp-error")
    amq.put_many(q, [b"one", b"two"])
    src = source(activemq, q, commit_mode=commit_mode)
    src.connect()
    receive(src, 2)
    # An ERROR arrives while the unit is open (an ACK the broker does not know: ActiveMQ answers ERROR)
    src._connection.conn.send_frame("ACK", {"id": "no-such-ack-id"})  # noqa: SLF001
    frames = src._connection.frames  # noqa: SLF001
    assert frames.wait_for(lambda: bool(frames.errors), time.monotonic() + 30)
    with pytest.raises(SourceConnectionError, match="the broker sent ERROR during the unit of work: "
                                                    ".*Unexpected ACK received"):
        src.commit()
    src.close()
    assert sorted(f.body for f in amq.drain(q)) == [b"one", b"two"]  # nothing was acknowledged


@pytest.mark.parametrize("ack_mode", ["individual", "cumulative"])
def test_a_move_the_broker_refuses_halts_the_listener_and_loses_nothing(
        rabbitmq: tuple[str, int], rabbit: StompClient, ack_mode: str) -> None:
    # Given a backout "queue" the broker refuses (an exchange that does not exist)
    q = f"/queue/test.refusedmove.{uuid.uuid4().hex[:8]}"
    rabbit.put_many(q, [b"poison", b"fine"])
    src = source(rabbitmq, q, broker="rabbitmq", ack_mode=ack_mode, **RABBIT)
    src.connect()
    got = {m.body: m for m in receive(src, 2)}
    # When the unit commits with the move, Then the listener halts naming the move and the reason
    with pytest.raises(BackoutFailedError, match=r"refused to move message .* to /exchange/mqbridge-no-such-x: "
                                                 r".*not_found") as info:
        src.commit(moves=[BackoutMove(got[b"poison"], "bad", "/exchange/mqbridge-no-such-x")])
    assert decide(info.value) is Decision.HALT
    src.close()
    # and the poison message is still on the queue; so is the other one, unless (individual acks) it was
    # removed before the move was tried: RabbitMQ's commits remove what stays first, so that a refused
    # move brings back nothing that landed
    left = [b"poison"] if ack_mode == "individual" else [b"fine", b"poison"]
    assert sorted(bytes(f.body) for f in rabbit.drain(q)) == left


# -- bad input at the edge --------------------------------------------------------------------
@pytest.mark.parametrize("ack_mode", ["cumulative", "individual"])
@pytest.mark.parametrize("commit_mode", ["transactional", "receipted"])
def test_messages_refused_at_the_edge_go_to_the_backout_queue_once_with_the_reason(
        activemq: tuple[str, int], amq: AmqClient, ack_mode: str, commit_mode: str, tmp_path: Path) -> None:
    # Given a timestamp past year 9999 (ActiveMQ passes it on as sent), a body over
    # max_message_size, and good messages around them
    q = unique_queue("stomp-edge")
    amq.put(q, b"first")
    amq.put(q, b"from the far future", {"timestamp": "253402300800000"})
    amq.put(q, b"good")
    amq.put(q, b"x" * 200)
    amq.put_many(q, [b"last"])
    log = BackoutLog.in_state_dir(tmp_path)
    src = source(activemq, q, backout=q + ".backout", ack_mode=ack_mode, commit_mode=commit_mode,
                 max_message_size=100, backout_log=log)
    src.connect()
    # When the listener reads, it gets only the good messages, and commits them
    got = receive(src, 3)
    assert [m.body for m in got] == [b"first", b"good", b"last"]
    assert src.receive(0.5) is None
    assert list(log.moves()) == [] and log._pending.empty()  # noqa: SLF001 -- nothing before the commit
    src.commit()
    src.close()
    log.close()
    # (the backout log has each move, for `mqbridge where`, once committed)
    assert sorted((m.backout_queue, m.listener, m.reason[:40]) for m in log.moves()) == [
        (q + ".backout", f"src1:{q}", "refused at the source: body of 200 bytes"),
        (q + ".backout", f"src1:{q}", "refused at the source: header timestamp:")]
    # Then the refused ones are on the backout queue once each, with the reason; the queue is empty
    moved = {bytes(f.body): f.headers for f in amq.drain(q + ".backout")}
    assert sorted(moved) == [b"from the far future", b"x" * 200]
    assert moved[b"from the far future"]["mqbridge-reason"] == (
        "refused at the source: header timestamp: 253402300800000 ms is not a time this bridge can store "
        "(past year 9999)")
    assert moved[b"from the far future"]["mqbridge-unparseable-timestamp"] == "253402300800000"
    assert moved[b"x" * 200]["mqbridge-reason"] == (
        "refused at the source: body of 200 bytes is over max_message_size (100 bytes)")
    assert amq.depth(q) == 0


def test_a_refused_message_alone_is_moved_without_waiting_for_a_unit(activemq: tuple[str, int], amq: AmqClient) -> None:
    q = unique_queue("stomp-edge-alone")
    amq.put_many(q, [b"too big for the bridge"])
    src = source(activemq, q, backout=q + ".backout", max_message_size=10)
    src.connect()
    assert src.receive(1.0) is None  # the listener never sees it ...
    src.close()
    assert [bytes(f.body) for f in amq.drain(q + ".backout")] == [b"too big for the bridge"]  # ... it is moved
    assert amq.depth(q) == 0


# -- the same through `mqbridge run` -----------------------------------------------------------
def test_a_bridge_whose_broker_refuses_connect_halts_that_listener_instead_of_looping(
        tmp_path: Path, rabbitmq: tuple[str, int]) -> None:
    # Given RabbitMQ and a source naming a virtual host that does not exist
    q = f"/queue/test.refused.{uuid.uuid4().hex[:8]}"
    config = stomp_config(tmp_path, q, port=rabbitmq[1], broker="rabbitmq", threads=1,
                          extra_source=RABBIT_SOURCE.replace('vhost = "/"', 'vhost = "no-such-vhost"'))
    # When the bridge runs until idle
    proc = mqbridge("run", "--config", str(config), "--until-idle", "1s")
    out, _ = proc.communicate(timeout=240)
    # Then the listener halts at once with the broker's reason (no restart loop) and the run fails
    assert proc.returncode == 1, out
    reason = (f"STOMP broker 127.0.0.1:{rabbitmq[1]} (source 'amq') refused CONNECT: Bad CONNECT: "
              "Virtual host 'no-such-vhost' access denied")
    assert f"amq:{q}#1: halted: {reason}" in out, out
    assert "restarting in" not in out and "ConnectFailedException" not in out, out


def test_a_message_whose_move_exceeds_the_brokers_frame_limit_halts_the_listener(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a private ActiveMQ with a 64 KB STOMP frame limit and a message just under it: it can
    # be put, but its move (which adds the mqbridge-* headers) cannot
    limit = 65536
    monkeypatch.setenv("MQBRIDGE_STOMP_MAX_FRAME", str(limit))
    with private_activemq(tmp_path / "amq") as broker:
        q = unique_queue("stomp-frame")
        body = b"b" * (limit - 300)
        with AmqClient("127.0.0.1", broker.port) as client:
            client.put_many(q, [body])
        src = source(("127.0.0.1", broker.port), q, backout=q + ".backout")
        src.connect()
        [got] = receive(src, 1)
        # When the listener moves it, Then the broker refuses the frame and the listener halts
        with pytest.raises(BackoutFailedError, match=rf"refused to move message .* \({len(body)} bytes\) to "
                                                     rf"{q}.backout: .*maximum frame size") as info:
            src.commit(moves=[BackoutMove(got, "bad", q + ".backout")])
        assert decide(info.value) is Decision.HALT
        src.close()
        # and the message is still on its queue, not on the backout queue
        with AmqClient("127.0.0.1", broker.port) as client:
            assert [bytes(f.body) for f in client.drain(q)] == [body]
            assert client.depth(q + ".backout") == 0


def test_activemq_refusing_bad_credentials_halts_the_listener_with_its_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a private ActiveMQ that lets only one user connect
    monkeypatch.setenv("MQBRIDGE_AMQ_AUTH_USER", "bridge")
    monkeypatch.setenv("MQBRIDGE_AMQ_AUTH_PASSWORD", "right-pw")
    with private_activemq(tmp_path / "amq") as broker:
        address = ("127.0.0.1", broker.port)
        wrong = source(address, "/queue/test.auth", user="bridge", password=SecretStr("wrong-pw"),
                       allow_plaintext_password=True)
        # When the adapter connects with a bad password, Then it is refused with ActiveMQ's reason
        with pytest.raises(SourceRefusedError) as info:
            wrong.connect()
        assert str(info.value) == (f"STOMP broker 127.0.0.1:{broker.port} (source 'src1') refused CONNECT: "
                                   "User name [bridge] or password is invalid.")
        assert decide(info.value) is Decision.HALT and "wrong-pw" not in str(info.value)
        # and with the right one it connects
        right = source(address, "/queue/test.auth", user="bridge", password=SecretStr("right-pw"),
                       allow_plaintext_password=True)
        right.connect()
        assert right.receive(0.2) is None
        right.close()
