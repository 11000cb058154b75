"""Owners of ledger records: which process wrote a bulk ("host:pid:create_time"), and whether it
may still be running. A process is judged by its pid only where that pid means what it means here
(the same host and pid namespace); elsewhere a backend asks the owner's heartbeat
(`Ledger.owner_alive`).
"""

from __future__ import annotations

import os
import socket

import psutil


def _pid_namespace() -> str:
    """This process's pid namespace (the inode of /proc/self/ns/pid), "" where there is none."""
    try:
        link = os.readlink("/proc/self/ns/pid")  # "pid:[4026531836]"
    except OSError:
        return ""
    return link.partition("[")[2].rstrip("]")


def this_host() -> str:
    """Where pids mean what they mean to this process: "hostname/pid-namespace" (just the host
    name without pid namespaces). Two containers with one host name have separate pid namespaces,
    so neither judges the other's processes by a pid it cannot see."""
    namespace = _pid_namespace()
    return f"{socket.gethostname()}/{namespace}" if namespace else socket.gethostname()


def owner_id() -> str:
    """This process as a ledger owner: "host:pid:create_time", host as `this_host` gives it (create
    time with two decimals, so that a later process reusing the pid is a different owner)."""
    pid = os.getpid()
    return f"{this_host()}:{pid}:{psutil.Process(pid).create_time():.2f}"


def judged_by_pid(owner: str) -> bool:
    """Whether `owner`'s pid can be checked from here: same host and same pid namespace (an owner
    written before pid namespaces were recorded: same host name)."""
    host = owner.rsplit(":", 2)[0]
    return host == (this_host() if "/" in host else socket.gethostname())


def owner_alive(owner: str) -> bool:
    """Whether the process named by `owner` (see `owner_id`) may still be running.

    Where its pid can be checked (`judged_by_pid`): its pid exists and started at the recorded time
    (within a second: the boot time psutil adds to the start ticks can move by a second). Elsewhere
    nothing can be checked here, so the owner is assumed alive (`Ledger.owner_alive` asks its
    heartbeat instead). An owner string that cannot be parsed is treated as alive too.
    """
    try:
        _host, pid_text, created_text = owner.rsplit(":", 2)
        pid, created = int(pid_text), float(created_text)
    except ValueError:
        return True
    if not judged_by_pid(owner):
        return True
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False  # killed, not yet reaped by its parent: it will never write again
        return bool(abs(process.create_time() - created) < 1.0)
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.AccessDenied:
        return True  # it exists; we just may not look at it
