"""The IBM MQ source against the fake queue manager: connecting, mapping, the unit of work."""

from __future__ import annotations

import gc
import importlib.util
import time
from datetime import datetime, timezone

import pytest
from pydantic import SecretStr, ValidationError

from mqbridge.errors import ConfigError, SourceConnectionError, SourceError
from mqbridge.listeners.mq import MqSource
from mqbridge.listeners.mq import driver as mq_driver
from tests.support.fakes import pymqi_fake
from tests.support.fakes.mq_testing import make_source, receive_n, source_config

C = pymqi_fake.CMQC


# -- configuration and connection --------------------------------------------------------------
def test_missing_driver_is_a_config_error_that_says_what_to_install() -> None:
    with pytest.raises(ConfigError) as info:
        mq_driver.load_driver(("mqbridge_no_such_driver_a", "mqbridge_no_such_driver_b"))
    assert 'pip install "mqbridge[ibmmq]"' in str(info.value)
    assert "client library" in str(info.value)


def test_the_first_importable_driver_is_used_and_without_one_the_source_refuses_to_start(qm) -> None:
    assert mq_driver.load_driver(("mqbridge_no_such_driver", "tests.support.fakes.pymqi_fake")) is pymqi_fake
    if all(importlib.util.find_spec(name) is None for name in mq_driver.DRIVER_MODULES):
        # No IBM MQ client here: the default path (what Bridge._default_source does) must refuse.
        with pytest.raises(ConfigError, match="mqbridge\\[ibmmq\\]"):
            MqSource("qm", source_config(qm), "ORDERS")


def test_connect_inquires_bothresh_boqname_deadq_and_maxumsgs(qm, source) -> None:
    assert (source.backout_threshold, source.backout_queue) == (3, "ORDERS.BACKOUT")
    assert source.dead_letter_queue == "SYSTEM.DEAD.LETTER.QUEUE"
    assert source.max_uncommitted == 10000
    info = qm.live_connections()[0].info
    assert (info["channel"], info["conn_name"]) == ("DEV.APP.SVRCONN", "mqhost(1414)")


def test_listener_settings_override_the_queue_attributes_but_defaults_do_not(qm) -> None:
    src = make_source(qm, "ORDERS", backout_threshold=7, backout_queue="OTHER.BO")
    src.connect()
    assert (src.backout_threshold, src.backout_queue) == (7, "OTHER.BO")
    src.close()
    # ListenerConfig's default backout_threshold (3) is not the user's choice: BOTHRESH wins.
    qm.queue("ORDERS").backout_threshold = 5
    src = make_source(qm, "ORDERS")
    src.connect()
    assert (src.backout_threshold, src.backout_queue) == (5, "ORDERS.BACKOUT")
    src.close()


def test_batch_above_max_uncommitted_messages_is_a_config_error_naming_both(qm) -> None:
    qm.max_uncommitted = 100
    src = make_source(qm, "ORDERS", batch=500)
    with pytest.raises(ConfigError) as info:
        src.connect()
    assert "500" in str(info.value) and "100" in str(info.value) and "MAXUMSGS" in str(info.value)
    assert qm.live_connections() == []


def test_a_password_without_tls_reaches_the_channel_only_when_explicitly_allowed(qm) -> None:
    # The refusals themselves are configuration tests (test_config.py); here the consent works.
    qm.users = {"app": "s3cret"}
    creds = {"user": "app", "password": SecretStr("s3cret")}
    with pytest.raises(ValidationError, match="cipher_spec"):
        make_source(qm, "ORDERS", config=creds)
    src = make_source(qm, "ORDERS", config=dict(creds, allow_plaintext_password=True))
    src.connect()
    info = qm.live_connections()[0].info
    assert info["user"] == "app" and info["password"] == "s3cret" and not info["cipher_spec"]
    src.close()


def test_tls_and_credentials_reach_the_channel_definition(qm) -> None:
    qm.users = {"app": "s3cret"}
    src = make_source(qm, "ORDERS", config={
        "user": "app", "password": "s3cret",
        "cipher_spec": "ANY_TLS12_OR_HIGHER", "key_repository": "/var/mqm/ssl/key",
        "certificate_label": "ibmwebspheremqapp",
        "reconnect": "qmgr"})
    src.connect()
    info = qm.live_connections()[0].info
    assert info["cipher_spec"] == "ANY_TLS12_OR_HIGHER" and info["cd_version"] >= 7
    assert info["key_repository"] == "/var/mqm/ssl/key" and info["certificate_label"] == "ibmwebspheremqapp"
    assert info["user"] == "app" and info["password"] == "s3cret"
    assert info["options"] & C.MQCNO_RECONNECT_Q_MGR and info["options"] & C.MQCNO_CLIENT_BINDING
    src.close()
    qm.users = {"app": "other"}
    with pytest.raises(ConfigError, match="2035"):
        src.connect()


def test_connection_problems_map_to_bridge_errors(qm) -> None:
    with pytest.raises(ConfigError, match="2085"):
        make_source(qm, "NO.SUCH.QUEUE").connect()
    with pytest.raises(ConfigError, match="2058"):
        MqSource("qm", source_config(qm, queue_manager="QMNOPE"), "ORDERS", driver=pymqi_fake).connect()
    qm.down = True
    with pytest.raises(SourceConnectionError, match="2538"):
        make_source(qm, "ORDERS").connect()


def test_without_inquire_authority_the_listener_settings_are_used(qm) -> None:
    qm.queue("ORDERS").denied.add("inq")
    src = make_source(qm, "ORDERS", backout_threshold=2, backout_queue="ORDERS.BACKOUT")
    src.connect()
    assert (src.backout_threshold, src.backout_queue) == (2, "ORDERS.BACKOUT")
    src.close()


# -- receiving ---------------------------------------------------------------------------------
def test_mqmd_and_properties_map_to_the_message(qm, source) -> None:
    when = datetime(2024, 2, 29, 23, 59, 58, 120000, tzinfo=timezone.utc)
    msg_id = qm.put("ORDERS", b"\x00\xffbody", correl_id=b"corr-1", backout_count=0, put_time=when,
                    properties={"orderType": "rush", "n": 5, "flag": True, "raw": b"\x01\x02"},
                    reply_to_q="REPLY.Q", reply_to_qmgr="QM2", put_appl_name="shop.exe", user="alice",
                    priority=4, expiry=600, persistence=C.MQPER_PERSISTENT)
    qm.put("ORDERS", b"second")
    message = source.receive(1.0)
    assert message is not None
    assert message.msg_id == msg_id.hex() and len(message.msg_id) == 48
    assert message.correlation_id == b"corr-1".ljust(24, b"\0").hex()
    assert message.body == b"\x00\xffbody" and message.source == "qm" and message.destination == "ORDERS"
    assert message.put_timestamp == when
    assert (message.delivery_count, message.redelivered) == (1, False)
    h = message.headers
    assert h["MQMD.PutApplName"] == "shop.exe" and h["MQMD.UserIdentifier"] == "alice"
    assert h["MQMD.ReplyToQ"] == "REPLY.Q" and h["MQMD.ReplyToQMgr"] == "QM2" and h["MQMD.Format"] == "MQSTR"
    assert (h["MQMD.Persistence"], h["MQMD.Priority"], h["MQMD.Expiry"]) == ("1", "4", "600")
    assert h["orderType"] == "rush" and h["n"] == "5" and h["flag"] == "true" and h["raw"] == "0102"
    second = source.receive(1.0)  # the MQMD was reset: not filtered on the first message's ids
    assert second is not None and second.body == b"second" and second.correlation_id is None
    assert "orderType" not in second.headers
    source.commit()


def test_receive_is_under_syncpoint_commit_removes_rollback_returns_with_backout_count(qm, source) -> None:
    qm.put_many("ORDERS", [b"a", b"b", b"c"])
    receive_n(source, 2)
    assert qm.queue("ORDERS").bodies() == [b"c"]  # hidden from other consumers
    source.rollback()
    assert qm.queue("ORDERS").bodies() == [b"a", b"b", b"c"]
    again = receive_n(source, 3)
    assert [(m.body, m.delivery_count, m.redelivered) for m in again] == [
        (b"a", 2, True), (b"b", 2, True), (b"c", 1, False)]
    source.commit()
    assert qm.queue("ORDERS").depth == 0


def test_empty_queue_returns_none_after_the_timeout(source) -> None:
    started = time.monotonic()
    assert source.receive(0.3) is None
    assert 0.25 <= time.monotonic() - started < 2.0


def test_messages_larger_than_the_buffer_are_got_again_whole(qm, source) -> None:
    big = bytes(range(256)) * 4096  # 1 MiB
    qm.put("ORDERS", big)
    message = source.receive(1.0)
    assert message is not None and message.body == big
    source.commit()
    assert qm.queue("ORDERS").depth == 0


def test_a_get_warning_still_delivers_the_message(qm) -> None:
    qm.put("ORDERS", b"caf\xe9", ccsid=9999)
    src = make_source(qm, "ORDERS", config={"convert": True})
    src.connect()
    message = src.receive(1.0)
    assert message is not None and message.body == b"caf\xe9"
    assert message.headers["mqbridge_get_warning"] == str(C.MQRC_NOT_CONVERTED)
    src.commit()
    assert qm.queue("ORDERS").depth == 0
    src.close()


def test_convert_turns_text_into_utf8(qm) -> None:
    qm.put("ORDERS", "café".encode("latin-1"), ccsid=819)
    src = make_source(qm, "ORDERS", config={"convert": True})
    src.connect()
    message = src.receive(1.0)
    assert message is not None and message.body == "café".encode() and message.headers["MQMD.CodedCharSetId"] == "1208"
    src.commit()
    src.close()


def test_a_unit_leaves_room_for_a_backout_put_per_message(qm) -> None:
    qm.max_uncommitted = 10
    qm.put_many("ORDERS", [b"m"] * 20)
    src = make_source(qm, "ORDERS", batch=8)
    src.connect()
    got = [m for m in (src.receive(0.05) for _ in range(12)) if m is not None]
    assert len(got) == 5  # 5 gets + up to 5 backout puts = MAXUMSGS
    src.commit(moves=[])
    src.close()


def test_max_uncommitted_reached_ends_the_unit_instead_of_failing(qm, source) -> None:
    qm.put_many("ORDERS", [b"1", b"2"])
    assert source.receive(1.0) is not None
    qm.inject("get", C.MQRC_SYNCPOINT_LIMIT_REACHED)
    assert source.receive(0.1) is None
    source.commit()
    assert qm.queue("ORDERS").bodies() == [b"2"]


def test_commit_cannot_return_part_of_a_unit(qm, source) -> None:
    qm.put("ORDERS", b"x")
    [message] = receive_n(source, 1)
    with pytest.raises(SourceError, match="whole"):
        source.commit(returns=[message])


def test_close_backs_out_before_disconnecting(qm) -> None:
    qm.put_many("ORDERS", [b"a", b"b"])
    src = make_source(qm, "ORDERS")
    src.connect()
    receive_n(src, 2)
    src.close()
    assert qm.queue("ORDERS").bodies() == [b"a", b"b"]
    assert [m.backout_count for m in qm.queue("ORDERS").messages] == [1, 1]
    assert qm.live_connections() == []


def test_garbage_collection_of_an_open_source_never_commits(qm) -> None:
    qm.put("ORDERS", b"a")
    src = make_source(qm, "ORDERS")
    src.connect()
    receive_n(src, 1)
    del src
    gc.collect()
    assert qm.queue("ORDERS").depth == 1  # still held by the orphaned connection, not committed
    qm.break_connections()  # the process ends: the queue manager backs the unit out
    assert qm.queue("ORDERS").bodies() == [b"a"]


def test_a_failing_backout_is_never_followed_by_a_disconnect(qm) -> None:
    qm.put("ORDERS", b"a")
    src = make_source(qm, "ORDERS")
    src.connect()
    receive_n(src, 1)
    qm.inject("backout", 2012)  # MQRC_ENVIRONMENT_ERROR: the connection is still there
    src.close()
    assert len(qm.live_connections()) == 1  # abandoned, not disconnected (MQDISC would commit)
    qm.break_connections()
    assert qm.queue("ORDERS").bodies() == [b"a"]


def test_reconnect_on_the_same_source_after_a_lost_connection(qm, source) -> None:
    qm.put("ORDERS", b"a")
    receive_n(source, 1)
    qm.break_connections()
    with pytest.raises(SourceConnectionError):
        source.receive(0.1)
    source.close()
    source.connect()
    again = source.receive(1.0)
    assert again is not None and again.delivery_count == 2
    source.commit()
