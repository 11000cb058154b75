"""The backlog of each listener: how many messages wait on its queue, and how old the oldest is
where the broker says (`mqbridge.backlog.poller.BacklogPoller`, read by probes the source adapters
provide through `BACKLOG_KINDS`)."""

from __future__ import annotations

from mqbridge.backlog.poller import BacklogPoller
from mqbridge.backlog.probe import BACKLOG_KINDS, BacklogProbe, BacklogUnavailable, ProbeFactory, Reading, probe_for

__all__ = ["BACKLOG_KINDS", "BacklogPoller", "BacklogProbe", "BacklogUnavailable", "ProbeFactory", "Reading",
           "probe_for"]
