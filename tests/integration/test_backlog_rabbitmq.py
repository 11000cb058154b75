"""RabbitMQ's backlog through its management API, on a private node of the real broker with the
management plugin enabled (scripts/rabbitmq.sh with MQBRIDGE_RABBIT_MGMT_PORT): the depth read
matches the messages put, drains to 0, and a user the API refuses is "unknown" with what to do."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from mqbridge.backlog import BacklogUnavailable
from mqbridge.config import StompSourceConfig
from mqbridge.listeners.stomp.management import RabbitManagement
from tests.support.exactly_once import Rabbit, free_port
from tests.support.processes import ROOT
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def node() -> Iterator[tuple[int, int]]:
    """A private RabbitMQ node: (STOMP port, management port); stopped and removed at the end."""
    base = Path(tempfile.mkdtemp(prefix="mqbridge-rabbit-mgmt-"))
    base.chmod(0o711)  # the node (the `rabbitmq` user) reaches its own directory below
    stomp_port, mgmt_port = free_port(), free_port()
    env = {**os.environ, "MQBRIDGE_RABBIT_BASE": str(base / "node"), "MQBRIDGE_RABBIT_NODE": "mqbridge-mgmt",
           "MQBRIDGE_RABBIT_STOMP_PORT": str(stomp_port), "MQBRIDGE_RABBIT_AMQP_PORT": str(free_port()),
           "MQBRIDGE_RABBIT_DIST_PORT": str(free_port()), "MQBRIDGE_RABBIT_MGMT_PORT": str(mgmt_port)}

    def script(action: str) -> None:
        subprocess.run([str(ROOT / "scripts" / "rabbitmq.sh"), action], cwd=ROOT, env=env, check=True,
                       stdout=subprocess.DEVNULL, timeout=180)

    try:
        script("start")
        yield stomp_port, mgmt_port
    finally:
        script("stop")
        shutil.rmtree(base, ignore_errors=True)


def source(stomp_port: int, mgmt_port: int, password: str = "guest") -> StompSourceConfig:
    return StompSourceConfig(port=stomp_port, broker="rabbitmq", user="guest", password=password,
                             management_url=f"http://127.0.0.1:{mgmt_port}")


def test_the_management_api_tells_the_queues_depth_and_it_drains_to_zero(node: tuple[int, int]) -> None:
    stomp_port, mgmt_port = node
    queue = f"/queue/backlog-{os.urandom(4).hex()}"
    rabbit = Rabbit(("127.0.0.1", stomp_port))
    probe = RabbitManagement("rmq", source(stomp_port, mgmt_port))

    def depth() -> int | None:
        try:
            return probe.read([queue], 5.0)[queue].depth
        except (BacklogUnavailable, OSError):  # the API may still be starting
            return None

    # Given 30 messages on a queue
    rabbit.put(queue, [(f"m{i}".encode(), {}) for i in range(30)])
    # Then the management API reads 30 waiting (its statistics lag up to collect_statistics_interval)
    wait_until(lambda: depth() == 30, 60, "a backlog of 30 from the management API")
    # When they are consumed, Then it reads 0
    assert len(rabbit.deliveries(queue, ack=True)) == 30
    wait_until(lambda: depth() == 0, 30, "a backlog of 0 once consumed")
    # A queue never declared has nothing waiting
    never = "/queue/never-declared-" + os.urandom(4).hex()
    assert probe.read([never], 5.0)[never].depth == 0


def test_a_refused_user_is_unknown_with_what_to_do(node: tuple[int, int]) -> None:
    stomp_port, mgmt_port = node
    probe = RabbitManagement("rmq", source(stomp_port, mgmt_port, password="wrong-password"))
    wait_until(lambda: _refusal(probe) is not None, 60, "the management API answering")
    assert "monitoring" in str(_refusal(probe))


def _refusal(probe: RabbitManagement) -> BacklogUnavailable | None:
    try:
        probe.read(["/queue/x"], 5.0)
    except BacklogUnavailable as exc:
        return exc if "HTTP 401" in str(exc) else None
    except OSError:
        return None
    return None
