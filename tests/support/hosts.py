"""Bridge hosts on this one machine: each a Linux network namespace with a host name of its own (a UTS
namespace per process started there), its own loopback, and its own address on a private /30 link
(a veth pair) to the root namespace, made by the test session and removed at its end.

The servers (ActiveMQ, RabbitMQ, PostgreSQL, S3Proxy) stay in the root namespace on 127.0.0.1; a host
reaches one only through a forwarder (`TcpProxy`) in the root namespace listening on the link's
root-side address, so everything a host says to a server crosses its link. No route leads anywhere
else (the namespace has no default route, and the root namespace does not forward). `Host.cut`
takes the link down: packets are dropped, so the host's connections hang as after a real network cut
(no reset, no FIN) until `Host.restore`. `Host.kill_all` is `kill -9` of every process of the host
(the bridge and its Spark JVM), like a host that died.

Needs root and `ip` (iproute2, installed by scripts/test-tools.sh); `hosts()` skips the test, saying
which, on a machine that refuses namespaces.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import class_archive as shared_archive
from tests.support.processes import ROOT
from tests.support.tcpproxy import TcpProxy
from tests.support.waiting import wait_until


def _ip(*args: str) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def refused() -> str | None:
    """Why this machine cannot make hosts (not root, no `ip`), or None."""
    if os.geteuid() != 0:
        return "bridge hosts are network namespaces: `ip netns add` needs root"
    if shutil.which("ip") is None or shutil.which("unshare") is None:
        return "bridge hosts need `ip` (iproute2) and `unshare` (util-linux): run scripts/test-tools.sh"
    return None


class Host:
    """One bridge host: network namespace `name` (also its host name), address `address` on its link,
    whose root side `gateway` is where its forwarders listen."""

    def __init__(self, name: str, device: str, subnet: str) -> None:
        self.name, self.device = name, device
        self.gateway, self.address = f"{subnet}.1", f"{subnet}.2"
        self._forwarders: dict[int, TcpProxy] = {}

    def make(self) -> None:
        _ip("netns", "add", self.name)
        _ip("link", "add", f"{self.device}r", "type", "veth", "peer", "name", f"{self.device}h", "netns", self.name)
        _ip("addr", "add", f"{self.gateway}/30", "dev", f"{self.device}r")
        _ip("link", "set", f"{self.device}r", "up")
        _ip("-n", self.name, "addr", "add", f"{self.address}/30", "dev", f"{self.device}h")
        _ip("-n", self.name, "link", "set", f"{self.device}h", "up")
        _ip("-n", self.name, "link", "set", "lo", "up")  # Spark's driver binds 127.0.0.1 there

    def remove(self) -> None:
        """Every process of the host killed, its forwarders closed, the namespace (and link) gone."""
        with contextlib.suppress(RuntimeError):
            self.kill_all()
        for forwarder in self._forwarders.values():
            forwarder.close()
        self._forwarders.clear()
        with contextlib.suppress(RuntimeError):
            _ip("netns", "del", self.name)
        with contextlib.suppress(RuntimeError):  # gone with the namespace, unless that failed
            _ip("link", "del", f"{self.device}r")

    def port_of(self, port: int) -> int:
        """The port on `gateway` through which this host reaches the server on 127.0.0.1:`port`."""
        if port not in self._forwarders:
            self._forwarders[port] = TcpProxy(("127.0.0.1", port), listen=self.gateway)
        return int(self._forwarders[port].port)

    def url_of(self, url: str, port: int) -> str:
        """`url` of the server on 127.0.0.1:`port` as this host reaches it."""
        return url.replace(f"127.0.0.1:{port}", f"{self.gateway}:{self.port_of(port)}")

    def cut(self) -> None:
        """The link down: the host's packets are dropped both ways (connections hang, none is reset)."""
        _ip("link", "set", f"{self.device}r", "down")

    def restore(self) -> None:
        _ip("link", "set", f"{self.device}r", "up")

    def pids(self) -> list[int]:
        return [int(pid) for pid in _ip("netns", "pids", self.name).split()]

    def commands(self) -> list[str]:
        """The command name of each process of the host (`/proc/PID/comm`: "python", "java")."""
        names = []
        for pid in self.pids():
            with contextlib.suppress(OSError):
                names.append(Path(f"/proc/{pid}/comm").read_text().strip())
        return names

    def kill_all(self) -> list[int]:
        """`kill -9` of every process of the host until none is left; the pids killed."""
        killed: list[int] = []

        def none_left() -> bool:
            pids = self.pids()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            killed.extend(pid for pid in pids if pid not in killed)
            return not pids
        wait_until(none_left, 30, f"every process of host {self.name} to die of SIGKILL")
        return killed

    def popen(self, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        """`argv` on this host, under its host name, output (both streams) piped. `ip netns exec`,
        `unshare` and `sh` each exec the next: the Popen's pid is the command's."""
        command = ["ip", "netns", "exec", self.name, "unshare", "--uts", "sh", "-c",
                   f'hostname {self.name} && exec "$@"', "sh", *argv]
        return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                stdin=subprocess.PIPE, env=env)

    def mqbridge(self, *args: str, failpoint: str | None = None) -> subprocess.Popen[str]:
        """`python -m mqbridge ARGS` on this host; `failpoint` as `tests.support.processes.mqbridge`.
        Spark's driver binds the host's own loopback and names itself `localhost`: no resolver here
        knows the host's name."""
        if args[:1] == ("run",) and "--config" in args:
            shared_archive.start(ROOT)
            shared_archive.link_into(Path(args[args.index("--config") + 1]))
        env = {k: v for k, v in os.environ.items() if k != "MQBRIDGE_FAILPOINT"}
        if failpoint:
            env["MQBRIDGE_FAILPOINT"] = failpoint
        env.update(SPARK_LOCAL_IP="127.0.0.1", SPARK_LOCAL_HOSTNAME="localhost")
        return self.popen([sys.executable, "-m", "mqbridge", *args], env)


def _remove_left_behind() -> None:
    """Remove the hosts of test sessions that died before removing theirs (their pid is gone)."""
    for line in _ip("netns", "list").splitlines():
        found = re.fullmatch(r"mqb(\d+)-([a-h])", line.split(" ")[0])
        if found and not Path(f"/proc/{found[1]}").exists():
            Host(found[0], f"mqb{found[1]}{found[2]}", "10.251.0").remove()


@contextlib.contextmanager
def made_hosts(count: int) -> Iterator[list[Host]]:
    """`count` hosts (`mqb<pid>-<letter>`, links 10.251.x.0/30 chosen by this process's pid), removed
    at the end whatever happened; skips the test where the machine refuses namespaces."""
    reason = refused()
    if reason is not None:
        pytest.skip(reason)
    with contextlib.suppress(RuntimeError):
        _remove_left_behind()
    pid = os.getpid()
    made: list[Host] = []
    try:
        for index in range(count):
            letter = "abcdefgh"[index]
            host = Host(f"mqb{pid}-{letter}", f"mqb{pid}{letter}", f"10.251.{(pid % 60) * 4 + index}")
            made.append(host)
            try:
                host.make()
            except RuntimeError as refusal:  # root, yet no CAP_NET_ADMIN (a container): refused
                if index == 0:
                    pytest.skip(f"this machine refuses network namespaces: {refusal}")
                raise
        yield made
    finally:
        for host in made:
            host.remove()


@pytest.fixture(scope="session")
def bridge_hosts() -> Iterator[list[Host]]:
    """Three bridge hosts for the session (a test module imports this fixture to use them; each test
    kills what it started on them)."""
    with made_hosts(3) as made:
        yield made
