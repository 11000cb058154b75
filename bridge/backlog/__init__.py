"""The backlog of each listener: how many messages wait on its queue, and how old the oldest is
where the broker says (`mqbridge.backlog.poller.BacklogPoller`, read by probes the source adapters
provide through their drivers, `mqbridge.drivers.Driver.backlog`)."""

from __future__ import annotations

from mqbridge.backlog.poller import BacklogPoller
from mqbridge.backlog.probe import BacklogProbe, BacklogUnavailable, ProbeFactory, Reading
from mqbridge.drivers import probe_for

__all__ = ["BacklogPoller", "BacklogProbe", "BacklogUnavailable", "ProbeFactory", "Reading",
           "probe_for"]
