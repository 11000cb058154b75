"""The README's RabbitMQ quick start, followed literally on the shared RabbitMQ: its broker commands
(`rabbitmqctl`), its configuration file and its `mqbridge` commands, read from the README itself,
land every message of the queue. Only what the test machine dictates is changed: the STOMP port
(61623 here), `sudo` (the tests run as root), the plugin (already enabled by scripts/rabbitmq.sh)
and the node's name."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.exactly_once import RABBIT, Rabbit, account, bodies
from tests.support.processes import ROOT, landed

pytestmark = pytest.mark.integration

#: The shared RabbitMQ's node (scripts/rabbitmq.sh), for rabbitmqctl.
NODE = "mqbridge-test@localhost"


def quickstart_block(name: str) -> str:
    """The fenced block after `<!-- quickstart rabbitmq: NAME -->` in the README."""
    readme = (ROOT / "README.md").read_text()
    match = re.search(rf"<!-- quickstart rabbitmq: {name} -->\n```\w*\n(.*?)```", readme, re.DOTALL)
    assert match is not None, f"README has no quick start block {name!r}"
    return match.group(1)


def commands(block: str) -> list[list[str]]:
    """The block's shell commands as argument lists (comments dropped)."""
    return [shlex.split(line, comments=True) for line in block.splitlines() if line.strip()]


def test_the_rabbitmq_quick_start_of_the_readme_lands_every_message(tmp_path: Path, spark: Any,
                                                                  rabbitmq: tuple[str, int]) -> None:
    env = {**os.environ, "RABBITMQ_NODENAME": NODE}
    # The broker commands, as root and with the plugin already on
    for argv in commands(quickstart_block("broker")):
        argv = argv[1:] if argv[0] == "sudo" else argv
        if argv[0] == "rabbitmq-plugins":
            continue
        if argv[:2] == ["rabbitmqctl", "add_user"]:  # a user left by an earlier run of this test
            subprocess.run(["rabbitmqctl", "delete_user", argv[2]], env=env, capture_output=True, timeout=60)
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"{shlex.join(argv)}: {done.stdout}{done.stderr}"
    # Messages on the quick start's queue
    rabbit = Rabbit(RABBIT)
    rabbit.deliveries("/queue/orders", ack=True)  # whatever an earlier run left
    sent = bodies(300, "quickstart")
    rabbit.put("/queue/orders", [(body, {}) for body in sent])
    # The configuration file, on this machine's RabbitMQ STOMP port
    config = quickstart_block("config").replace("port = 61613", f"port = {RABBIT[1]}")
    (tmp_path / "rabbitmq.toml").write_text(config)
    # The mqbridge commands, in the quick start's order
    outputs = []
    for argv in commands(quickstart_block("run")):
        if argv[0] == "export":
            name, value = argv[1].split("=", 1)
            env[name] = value
            continue
        assert argv[0] == "mqbridge", argv
        done = subprocess.run([sys.executable, "-m", "mqbridge", *argv[1:]], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{shlex.join(argv)} exited {done.returncode}:\n{done.stdout[-4000:]}" \
                                     f"{done.stderr[-4000:]}"
        outputs.append(done.stdout + done.stderr)
    # Every message landed once in the table beside the configuration, and the queue is empty
    accounting = account(sent, landed(spark, tmp_path / "landing" / "orders"))
    assert accounting.clean, str(accounting)
    assert rabbit.depth("/queue/orders") == 0
    assert "300" in outputs[-1], outputs[-1]  # `mqbridge tables` shows the 300 rows
