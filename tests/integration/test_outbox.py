"""The preprocessors' transactional outbox (`mqbridge.emit`, docs/plugins.md "Derived messages") under
kill -9 around the source commit: real ActiveMQ and RabbitMQ, the persistent fake IBM MQ queue
manager, the landing ledger on, Spark reading the table.

The listener runs the example plugin `examples/plugins/notify.py`, which emits a notice (the body's
SHA-256) for every message it processes, then a preprocessor that refuses poison messages (after
their notice was emitted): they go back, and at the second delivery (`backout_threshold = 2`) to
the backout queue. A bridge
killed at a failpoint around the source commit of its first unit, then run again until idle, must
leave exactly one notice per landed message and none for a moved one; on RabbitMQ, whose commits
confirm the notices before the ACK (no atomic transaction there), a kill between the two sends the
killed unit's notices twice: at least one each, the duplicates counted and only that unit's. The kills before the COMMIT
exercise the re-derivation: the first unit's messages are published in the ledger but still on the
queue, so the restarted bridge recognises them and derives their notices again for the commit that
finally removes them. The bulks are raw (pyarrow writes them: no Spark JVM per bridge run); Spark
reads the table."""

from __future__ import annotations

import collections
import hashlib
import json
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.amq import AmqClient, unique_queue
from tests.support.configs import LISTENER, toml_value
from tests.support.exactly_once import RABBIT_SOURCE, Rabbit, account, interleaved
from tests.support.fakes.mq_server import FakeQueueManagerServer
from tests.support.plugins import REJECT_POISON
from tests.support.processes import (
    MQ_BOQ,
    MQ_DLQ,
    MQ_QUEUE,
    ROOT,
    fake_mq_env,
    landed,
    mq_bridge,
    run_until_idle,
    run_until_killed,
    stomp_config,
)

pytestmark = pytest.mark.integration

GOOD, EVERY = 200, 50  # 200 good messages, a poison one after every 50th
EXAMPLE = ROOT / "examples" / "plugins" / "notify.py"


def messages(tag: str) -> tuple[list[bytes], list[bytes]]:
    good = [json.dumps({"id": i, "tag": tag, "pad": "x" * 100}).encode() for i in range(GOOD)]
    poison = [f"poison {tag} {i}".encode() for i in range(GOOD // EVERY)]
    return good, poison


def plugins_in(tmp_path: Path) -> None:
    """The example plugin and the poison-refusing one in `<tmp_path>/plugins`."""
    plugins = tmp_path / "plugins"
    plugins.mkdir(mode=0o755)
    shutil.copyfile(EXAMPLE, plugins / "notify.py")
    (plugins / "reject.py").write_text(REJECT_POISON)
    for path in plugins.iterdir():
        path.chmod(0o644)


def with_notify(tmp_path: Path, config: Path, audit: str) -> Path:
    """`config` running notify (to `audit`, allowed) then reject_poison on its listener."""
    plugins_in(tmp_path)
    text = config.read_text().replace('plugin_dirs = []', 'plugin_dirs = ["plugins"]', 1)
    chain = toml_value([{"name": "notify", "destination": audit}, "reject_poison"])
    text = text.replace("[[listeners]]\n", f"[[listeners]]\npreprocessors = {chain}\n"
                                           f"outbox_allow = {toml_value([audit])}\n", 1)
    config.write_text(text)
    return config


def notices(frames: list[Any]) -> collections.Counter[str]:
    """How often each body's SHA-256 was noticed (each frame must be a notice of the example)."""
    found: collections.Counter[str] = collections.Counter()
    for frame in frames:
        notice = json.loads(bytes(frame.body))
        assert frame.headers.get("notice-of") == notice["msg_id"], frame.headers
        found[notice["sha256"]] += 1
    return found


def sha(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


@pytest.mark.parametrize(("broker", "failpoint"), [
    ("activemq", "before_source_commit"),  # published in the ledger, nothing sent: re-derived on restart
    ("activemq", "after_backout_send"),  # notices and moves SENT in the transaction, no COMMIT
    ("activemq", "after_source_commit"),  # committed: notices out, the restart must not send them again
    ("rabbitmq", "after_backout_send"),  # notices confirmed, no ACK yet: that unit's notices go twice
])
def test_derived_messages_are_sent_once_per_landed_message_across_a_kill(
        tmp_path: Path, spark: Any, amq: AmqClient, activemq: tuple[str, int], rabbitmq: tuple[str, int],
        broker: str, failpoint: str) -> None:
    # Given good and poison messages, and a bridge (one thread, units of 100) whose listener emits a
    # notice for every message it processes, killed at the failpoint in the commit of its first unit
    good, poison = messages(f"{broker}-{failpoint}")
    if broker == "activemq":
        queue = unique_queue(f"outbox-{failpoint}")
        amq.put_many(queue, interleaved(good, poison, EVERY))
        config = stomp_config(tmp_path, queue, threads=1, batch=100, extra_listener="backout_threshold = 2")
    else:
        rabbit = Rabbit(rabbitmq)
        queue = f"/queue/test.outbox-{failpoint}.{uuid.uuid4().hex[:8]}"
        rabbit.put(queue, [(body, {"x-eo-id": f"id-{i}"}) for i, body in enumerate(interleaved(good, poison, EVERY))])
        config = stomp_config(tmp_path, queue, port=rabbitmq[1], broker="rabbitmq", threads=1, batch=100,
                              extra_source=RABBIT_SOURCE,
                              extra_listener='identity = "header:x-eo-id"\nbackout_threshold = 2')
    audit = f"{queue}.audit"
    with_notify(tmp_path, config, audit)
    run_until_killed(config, failpoint)
    # When it is started again and runs until idle (5 s: on a loaded machine the broker may take a
    # while to give the killed bridge's second unit in flight back)
    out = run_until_idle(config, idle="5s")
    # Then every good message is in the table exactly once, and no poison message is
    result = account(good, landed(spark, tmp_path / "landing" / "orders"))
    assert result.clean, f"{result}\n{out[-4000:]}"
    if failpoint != "after_source_commit":  # the killed unit came back, recognised in the ledger
        assert "already landed; committed without landing them again" in out, out[-4000:]
    # And the auditor got exactly one notice per landed message, none for a moved one
    if broker == "activemq":
        with AmqClient(*activemq) as client:  # the fixture's client may have idled out during the runs
            frames, moved = client.drain(audit), client.drain(queue + ".backout")
    else:
        frames, moved = rabbit.deliveries(audit, ack=True), rabbit.deliveries(queue + ".backout", ack=True)
    got = notices(frames)
    assert {body for body in poison if sha(body) in got} == set(), "a moved message was noticed"
    lost = [body for body in good if sha(body) not in got]
    duplicated = {digest: n for digest, n in got.items() if n > 1}
    if broker == "rabbitmq":  # the killed unit's notices, sent again when it came back; no other
        assert lost == [] and 0 < len(duplicated) <= 100 and set(duplicated.values()) == {2}, \
            f"notices lost {len(lost)}, duplicated {len(duplicated)}"
    else:
        assert (len(lost), len(duplicated)) == (0, 0), f"notices lost {len(lost)}, duplicated {len(duplicated)}"
    assert len(frames) == len(good) + len(duplicated)
    assert sorted(bytes(f.body) for f in moved) == sorted(poison)


AUDIT = "ORDERS.AUDIT"


def test_derived_messages_on_ibm_mq_are_put_once_per_landed_message_across_kills(tmp_path: Path, spark: Any) -> None:
    # Given 300 messages on the persistent fake queue manager, 10 of them already at BOTHRESH (the
    # adapter moves them at get time, before the chain sees them), and a bridge whose listener emits
    # a notice to ORDERS.AUDIT for every message it processes
    state, name = tmp_path / "qm.state", "QMOUTBOX"
    qm = FakeQueueManagerServer(name, dead_letter_queue=MQ_DLQ, state_file=state)
    try:
        qm.define_queue(MQ_QUEUE, backout_threshold=5, backout_queue=MQ_BOQ)
        qm.define_queue(MQ_BOQ)
        qm.define_queue(AUDIT)
        with qm.deferred_persistence():
            bodies = [f"order-{i:04d}".encode() for i in range(300)]
            ids = [qm.put(MQ_QUEUE, body, backout_count=5 if i % 30 == 0 else 0) for i, body in enumerate(bodies)]
    finally:
        qm.close()
    poison = {bodies[i] for i in range(0, 300, 30)}
    plugins = tmp_path / "plugins"
    plugins.mkdir(mode=0o755)
    shutil.copyfile(EXAMPLE, plugins / "notify.py")
    (plugins / "notify.py").chmod(0o644)
    chain = toml_value([{"name": "notify", "destination": AUDIT}])
    config = (mq_bridge(name, threads=1, batch=100).set("bridge", plugin_dirs=["plugins"])
              .add(LISTENER, f"preprocessors = {chain}\noutbox_allow = {toml_value([AUDIT])}")
              .write(tmp_path / "bridge.toml"))
    env = fake_mq_env(state)
    # When the bridge is killed after putting a unit's derived messages (no MQCMIT), then after the
    # ledger says published (the unit is recognised and its notices re-derived), then runs until idle
    run_until_killed(config, "after_results_put", env_extra=env)
    run_until_killed(config, "before_source_commit", env_extra=env)
    run_until_idle(config, env_extra=env)
    # Then every good message landed once, and ORDERS.AUDIT holds exactly one notice per landed message
    result = account([b for b in bodies if b not in poison], landed(spark, tmp_path / "landing" / "orders"))
    assert result.clean, str(result)
    qm = FakeQueueManagerServer(state_file=state, register=False)
    try:
        stored = qm.queue(AUDIT).visible()
        got = collections.Counter(json.loads(m.data)["sha256"] for m in stored)
        assert {m.prop("notice-of") for m in stored} == {i.hex() for i, b in zip(ids, bodies, strict=True)
                                                          if b not in poison}
        assert qm.queue(MQ_QUEUE).depth == 0 and qm.queue(MQ_BOQ).depth == len(poison)
    finally:
        qm.close()
    lost = [b for b in bodies if b not in poison and sha(b) not in got]
    duplicated = {d: n for d, n in got.items() if n > 1}
    assert (len(lost), len(duplicated), len(stored)) == (0, 0, len(bodies) - len(poison))
    assert not any(sha(b) in got for b in poison), "a moved message was noticed"
