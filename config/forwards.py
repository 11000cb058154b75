"""`[[forwards]]`: the standing reverse path. `mqbridge follow` tails a table and sends each row it
lands from then on to destinations chosen by the row's type (the table) and its sender (the queue
the bridge read it from, `senders`, or any condition on the row, `where`), once per row and
destination (`mqbridge.resend.follow`).

The checks that need the whole file (the source exists and can be sent to, the destinations fit it,
names are unique) are `forward_problems`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from pydantic import Field, field_validator

from mqbridge.config.base import Duration, Model, check_table, parse_duration
from mqbridge.config.results import ListenerConfig, reachable_problem
from mqbridge.config.sources import SourceConfig
from mqbridge.errors import Loc

#: A forward's name: it names the forward's progress in the follow ledger and its marker queues.
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


class ForwardConfig(Model):
    """`[[forwards]]`: rows of one table sent on to one or more destinations of a configured source."""

    name: str = Field(description="The forward's name (letters, digits, '-', '_'): its progress is kept under it; "
                                  "renaming it starts from the newest rows again")
    table: str = Field(description="The table to follow: a type's `table` under the warehouse (its type)")
    source: str = Field(description="The configured source whose broker the rows are sent to")
    to: list[str] = Field(min_length=1, description="Destinations on that source: each row goes to each, once")
    senders: list[str] | None = Field(default=None, min_length=1,
                                      description="Only rows the bridge read from these queues or topics (the row's "
                                                  "`destination`); None: rows from any")
    where: str | None = Field(default=None, description="Only rows matching this Spark SQL condition on the landed "
                                                        "row (e.g. \"headers['region'] = 'eu'\")")
    every: Duration = Field(default=parse_duration("5s"), gt=0,
                            description="How often the forward looks for newly landed bulks")
    batch: int = Field(default=100, ge=1, le=10000, description="Rows per unit of work at a destination")
    backout_queue: str | None = Field(default=None,
                                      description="Where a row the destination refuses `backout_threshold` times goes "
                                                  "(on the same source), with the reason; None: the forward holds at "
                                                  "that row")
    backout_threshold: int = Field(default=3, ge=1, description="Refusals of one row before it goes to "
                                                                "`backout_queue`")
    start: str = Field(default="new", pattern="^(new|all)$",
                       description="Where a new forward starts: \"new\" (bulks landed from its first run on) or "
                                   "\"all\" (every bulk the landing ledger still holds)")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.fullmatch(value):
            raise ValueError(f"{value!r}: a forward's name is 1 to 64 letters, digits, '-' and '_'")
        return value

    @field_validator("table")
    @classmethod
    def _table(cls, value: str) -> str:
        check_table(value)
        return value


def forward_problems(forwards: Sequence[ForwardConfig], sources: Mapping[str, SourceConfig],
                     listeners: Sequence[ListenerConfig], exactly_once: bool) -> list[tuple[Loc, str]]:
    """What `mqbridge follow` could not do with these forwards: a name twice, a source not configured
    or not one it can send to, a destination that source cannot reach, a destination twice, a
    destination a listener of this configuration reads (each row would land again and be sent again,
    without end); and any forward at all without the landing ledger (it finds new bulks there)."""
    read = {(listener.source, listener.queue) for listener in listeners}
    problems: list[tuple[Loc, str]] = []
    seen: set[str] = set()
    for i, forward in enumerate(forwards):
        where: Loc = ("forwards", i)
        if forward.name in seen:
            problems.append(((*where, "name"), f"{forward.name!r} names two forwards"))
        seen.add(forward.name)
        if not exactly_once:
            problems.append((where, "a forward finds newly landed bulks in the landing ledger, which "
                                    "[bridge] exactly_once = false does not keep"))
        source = sources.get(forward.source)
        if source is None:
            problems.append(((*where, "source"), f"{forward.source!r} is not a configured source "
                                                 f"(configured: {', '.join(sources)})"))
            continue
        if len(set(forward.to)) != len(forward.to):
            problems.append(((*where, "to"), "a destination is named twice"))
        keyed: list[tuple[Loc, str]] = [((*where, "to", j), d) for j, d in enumerate(forward.to)]
        if forward.backout_queue is not None:
            keyed.append(((*where, "backout_queue"), forward.backout_queue))
            if forward.backout_queue in forward.to:
                problems.append(((*where, "backout_queue"), "is one of the forward's destinations"))
        for key, destination in keyed:
            problem = reachable_problem(destination, source, "no consumer could read the rows there",
                                        "cannot be sent to by a forward")
            if (forward.source, destination) in read:
                problem = (f"{destination} is read by a listener of this configuration: each row sent there would "
                           "land again and be sent again, without end")
            if problem:
                problems.append((key, problem))
    return problems
