"""Bridges as operators run them: `mqbridge run` processes, killed at failpoints, and what they
left behind (rows per body, staging leftovers)."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support import class_archive as shared_archive
from tests.support.bridge import read_table
from tests.support.configs import LISTENER, BridgeToml, fake_mq_source

ROOT = Path(__file__).resolve().parents[2]


def process_bridge(name: str, *, state_dir: str = "state") -> BridgeToml:
    """What every `mqbridge run` of these tests shares: type `orders` landing in `landing/orders`
    and the ledger in `state_dir`, both beside the configuration file; no monitoring endpoint."""
    return BridgeToml({
        "bridge": {"name": name, "control_interval": "1s", "plugin_dirs": [], "state_dir": state_dir},
        "monitoring": {"listen": ""},
        # pyarrow writes the raw bulks: these tests start many bridges with small bulks, a Spark write
        # costs a second on a cold JVM, and a bridge that needs no Spark starts no JVM (10-35 s here).
        # The default writer (Spark) runs in tests/integration/test_in_flight.py, test_spark_executor.py,
        # test_spark_modes.py, test_start_without_spark.py and the demo.
        "spark": {"warehouse": "landing", "writer": "auto"},
        "types.orders": {"bulk_size": "128KB", "bulk_timeout": "500ms"},
    })


def stomp_bridge(queue: str, *, port: int = 61613, ack_mode: str | None = None, broker: str = "activemq",
                 threads: int = 2, batch: int = 200, extra_bridge: str = "", extra_listener: str = "",
                 extra_source: str = "", spark: str = 'master = "local[2]"',
                 state_dir: str = "state") -> BridgeToml:
    """A `mqbridge run` on one STOMP queue (`process_bridge`); `spark` is where Spark runs
    (`master = …` or `remote = …`), and may end with sub-tables of `[spark]` (`[spark.conf]`);
    the `extra_*` texts are added to `[bridge]`, `[[listeners]]` and `[sources.amq]`; `ack_mode` None:
    the broker's default (cumulative; RabbitMQ: individual)."""
    return (process_bridge("eo", state_dir=state_dir).add("bridge", extra_bridge).add("spark", spark)
            .set("sources.amq", kind="stomp", port=port, broker=broker, ack_mode=ack_mode, heartbeat="10s")
            .add("sources.amq", extra_source)
            .listener(source="amq", queue=queue, threads=threads, batch=batch, wait="200ms",
                      message_type="orders", backout_queue=f"{queue}.backout")
            .add(LISTENER, extra_listener))


def stomp_config(tmp_path: Path, queue: str, *, name: str = "bridge.toml", **options: Any) -> Path:
    """`stomp_bridge(queue, **options)` written to `<tmp_path>/<name>`; its path."""
    return stomp_bridge(queue, **options).write(tmp_path / name)


def memory_bridge(name: str = "mem", *, writer: str = "auto") -> BridgeToml:
    """A `mqbridge run` on queue `orders` of its in-process memory broker (`process_bridge`): it
    never gets a message (nothing outside the process can put one), for tests of what the process
    shows of itself. `writer = "spark"` makes it start its Spark driver JVM (beside its listener)."""
    return (process_bridge(name).set("spark", master="local[1]", writer=writer)
            .set("sources.mem", kind="memory")
            .listener(source="mem", queue="orders", message_type="orders", backout_queue="orders.backout",
                      wait="200ms"))


#: The queues of `mq_bridge`'s queue manager.
MQ_QUEUE, MQ_BOQ, MQ_DLQ = "ORDERS", "ORDERS.BOQ", "SYSTEM.DEAD.LETTER.QUEUE"


def mq_bridge(queue_manager: str, *, threads: int = 2, batch: int = 100) -> BridgeToml:
    """A `mqbridge run` on queue ORDERS of the fake queue manager `queue_manager` (`process_bridge`;
    the process needs `fake_mq_env`)."""
    return (process_bridge("eo-mq").set("spark", master="local[2]", warehouse="landing")
            .set("sources.qm", **fake_mq_source(queue_manager))
            .listener(source="qm", queue=MQ_QUEUE, threads=threads, batch=batch, wait="200ms",
                      message_type="orders"))


def mq_config(tmp_path: Path, queue_manager: str, **options: Any) -> Path:
    """`mq_bridge(queue_manager, **options)` written to `<tmp_path>/bridge.toml`; its path."""
    return mq_bridge(queue_manager, **options).write(tmp_path / "bridge.toml")


#: The commands that start an in-process Spark driver from the configuration's `[spark]` (its
#: state_dir's class-data archive halves that JVM's start: 7-10 s of each `mqbridge purge` here).
SPARK_COMMANDS = frozenset({"run", "purge", "compact", "replay", "follow"})


def mqbridge(*args: str, failpoint: str | None = None, env_extra: dict[str, str] | None = None,
             class_archive: bool = True, **kwargs: Any) -> subprocess.Popen[str]:
    """`python -m mqbridge ARGS` with its output collected; `failpoint` kills it at that step;
    `env_extra` adds to (or overrides) its environment. A command that starts the Spark driver
    (`SPARK_COMMANDS`) gets the session's class-data archive in its state_dir once it is made
    (`tests.support.class_archive`), unless `class_archive` is False."""
    if class_archive and args[:1] and args[0] in SPARK_COMMANDS and "--config" in args:
        shared_archive.start(ROOT)
        shared_archive.link_into(Path(args[args.index("--config") + 1]))
    env = dict(os.environ)
    env.pop("MQBRIDGE_FAILPOINT", None)
    env.update(env_extra or {})
    if failpoint:
        env["MQBRIDGE_FAILPOINT"] = failpoint
    kwargs.setdefault("stdout", subprocess.PIPE)  # or a file the test reads as the process writes it
    return subprocess.Popen([sys.executable, "-m", "mqbridge", *args], cwd=ROOT, stderr=subprocess.STDOUT,
                            text=True, env=env, **kwargs)


def output_within(proc: subprocess.Popen[str], timeout: float, waited_for: str) -> str:
    """The output of `proc` once it ends; killed after `timeout` seconds, AssertionError saying what was
    waited for, with the end of the output."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        raise AssertionError(f"{waited_for} did not happen within {timeout:.0f}s; the bridge's output (last 6000 "
                             f"characters):\n{out[-6000:]}") from None
    return out


def run_until_said(config: Path, said: str, log: Path, timeout: float,
                   env_extra: dict[str, str] | None = None, class_archive: bool = True) -> str:
    """Run a bridge with its output in `log` until it says `said` (then SIGTERM, and its end waited
    for); its output. AssertionError after `timeout` seconds, or when it ends first, saying what was
    waited for, with the end of the output. For outages: a bridge that waits out a sink outage
    never ends by itself. `class_archive`: as for `mqbridge`."""
    with log.open("w") as out_file:
        proc = mqbridge("run", "--config", str(config), stdout=out_file, env_extra=env_extra,
                        class_archive=class_archive)
    try:
        deadline = time.monotonic() + timeout
        while said not in log.read_text() and proc.poll() is None:
            assert time.monotonic() < deadline, (f"waited {timeout:.0f} s for the bridge to say {said!r}; its "
                                                 f"output (last 4000 characters):\n{log.read_text()[-4000:]}")
            time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(180)
    out = log.read_text()
    assert said in out, f"the bridge ended (exit {proc.returncode}) without saying {said!r}:\n{out[-4000:]}"
    return out


def run_until_killed(config: Path, failpoint: str, timeout: float = 240,
                     env_extra: dict[str, str] | None = None) -> str:
    """Run until the failpoint kills the process (SIGKILL); its output."""
    proc = mqbridge("run", "--config", str(config), failpoint=failpoint, env_extra=env_extra)
    out = output_within(proc, timeout, f"a kill at failpoint {failpoint}")
    assert proc.returncode == -signal.SIGKILL, f"expected a kill at {failpoint}, got {proc.returncode}:\n{out}"
    assert f"failpoint {failpoint} reached" in out, out
    return out


def run_until_idle(config: Path, idle: str = "1s", timeout: float = 300,
                   env_extra: dict[str, str] | None = None) -> str:
    """Run to the end (`--until-idle`), expecting exit 0; its output. One second of idleness is enough
    for a bridge whose messages are on its queues before it starts: it is idle only once every listener
    holds nothing, the collector is empty and, where the broker tells a queue's depth, the backlog poller
    has read it empty since the last commit (`Supervisor.idle`); each second more was a second of every
    such run of the suite."""
    proc = mqbridge("run", "--config", str(config), "--until-idle", idle, env_extra=env_extra)
    out = output_within(proc, timeout, f"the end of `mqbridge run --until-idle {idle}`")
    assert proc.returncode == 0, out
    return out


@dataclass(frozen=True)
class KilledInTurn:
    """The outputs of `killed_in_turn`."""

    after: dict[str, str]  # by step: every run after the kill at that step (where its recovery is told), joined
    last: str  # the run until idle
    every: str  # every run's, joined


def killed_in_turn(config: Path, steps: Sequence[str], idle: str = "1s") -> KilledInTurn:
    """Kill the bridge of `config` at each of `steps` in turn, then run it until idle: each start
    recovers what the kill before it left and then dies at the next step (`run_until_killed`), so that
    one bridge's recovery of every step costs one start per step, not two (the queue must hold enough
    messages for a bulk at each step)."""
    killed = [run_until_killed(config, step) for step in steps]
    last = run_until_idle(config, idle)
    return KilledInTurn({step: "".join(killed[n + 1:]) + last for n, step in enumerate(steps)}, last,
                        "".join(killed) + last)


#: A directory whose `pymqi` is the fake driver over a persistent fake queue manager.
FAKE_PYMQI_PATH = ROOT / "tests" / "support" / "fake_pymqi_path"


def fake_mq_env(state_file: Path) -> dict[str, str]:
    """The environment for a `mqbridge run` whose MQ driver is the fake over `state_file`: the
    fake `pymqi` first on PYTHONPATH, then the repository root (for `tests.support`)."""
    from tests.support.fakes.mq_persistence import STATE_ENVIRONMENT_VARIABLE

    path = [str(FAKE_PYMQI_PATH), str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {"PYTHONPATH": os.pathsep.join(path), STATE_ENVIRONMENT_VARIABLE: str(state_file)}


def landed(spark: Any, table: Path) -> collections.Counter[bytes]:
    """How often each body is in the table (as any reader sees it)."""
    if not table.exists():
        return collections.Counter()
    return collections.Counter(bytes(r.body) for r in read_table(spark, table))


def leftovers(table: Path) -> list[Path]:
    """Staging and Spark `_temporary` files still under a table directory."""
    return [p for p in table.rglob("*") if p.is_file() and any(part in ("_staging", "_temporary")
                                                                  for part in p.relative_to(table).parts)]
