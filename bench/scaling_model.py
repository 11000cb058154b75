"""The capacity model of N bridges on one queue and one table (docs/scaling.md), apart from the
measurements (`bench/scaling.py`) so that it can be read, and checked, on its own.

The aggregate rate of N bridges is the least of the terms below; each term is a rate in messages per
second computed from inputs measured at one N (`Inputs`). Which term is the least says what gives out.

  per bridge   N x min(1 / Python CPU-s per message of one bridge (one process's Python runs on one
               core at a time: the GIL), messages one bridge can hold in flight with the threads it ran /
               its receipt-to-commit: Little's law)
  machine CPU  (cores free of other work - N x the cores one idle bridge keeps busy) / (CPU-s per message
               of every process that serves a message: the bridges' Python, their Spark JVMs, the broker,
               PostgreSQL, less the idle bridges' part): only while they share one machine, as here; on
               separate hosts each bridge host has its own cores
  broker       what the broker dispatches to consumers that acknowledge nothing (the auto-ack consumer
               of bench/references.py): no consumer of that queue gets more
  ledger       PostgreSQL's ledger transactions per second (a direct burst of the bridge's
               prepare/publish cycle, every writer serialised on the ledger's one advisory lock) /
               ledger transactions per message measured in the bridges
  table        commits per second into one Delta table x rows per commit measured in the bridges; the
               commits: N x what one writer gets (a direct burst of small commits, each after the one
               before), but never more than 1 / the commit's log part (the burst's commits from their last
               data file to their log entry, by the files' times): writers overlap their data files, not
               their log entries
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Inputs:
    """What the model needs, measured at one N (all per message unless said otherwise)."""

    bridges: int
    cores: int
    free_cores: float  # cores less what other processes of the machine used over the timed window
    rate: float  # msg/s, all bridges together
    standing_cpu: float  # cores one idle bridge uses (its Python and JVM between messages: ticks, GC, heartbeats)
    python_cpu: float  # CPU-s per message of the bridges' Python processes, summed
    jvm_cpu: float  # of their Spark JVMs
    broker_cpu: float
    postgres_cpu: float
    in_flight: float  # messages one bridge can hold: the threads it ran (the adaptive law's choice) x in_flight
    #                   x batch
    receipt_to_commit: float  # seconds, p50
    ledger_xacts: float  # PostgreSQL transactions per message
    rows_per_commit: float
    dispatch: float  # msg/s, the auto-ack consumer
    ledger_capacity: float  # ledger transactions/s of the burst
    table_commits: float  # commits/s of the burst: one writer, each commit after the one before
    table_log_commits: float  # 1 / the burst's log part: what all writers of the table together get


def terms(inputs: Inputs, n: int, free_cores: float | None = None, shared_machine: bool = True) -> dict[str, float]:
    """Each term's rate (msg/s) for `n` bridges from `inputs` (measured at `inputs.bridges`):
    per-message costs are per message whichever bridge served it, so they carry over to another N;
    `free_cores` is the machine's free CPU at the N predicted (other work changes it, not the bridges)."""
    python_per_bridge = inputs.python_cpu  # summed over the bridges, per message of any: one bridge's own
    per_bridge = min(1 / python_per_bridge, inputs.in_flight / inputs.receipt_to_commit)
    out = {"per bridge": n * per_bridge}
    if shared_machine:
        out["machine CPU"] = machine_cpu(inputs, n, inputs.free_cores if free_cores is None else free_cores)
    out["broker"] = inputs.dispatch
    out["ledger"] = inputs.ledger_capacity / inputs.ledger_xacts
    out["table"] = min(n * inputs.table_commits, inputs.table_log_commits) * inputs.rows_per_commit
    return out


def machine_cpu(inputs: Inputs, n: int, free_cores: float) -> float:
    """The rate the free cores serve: each of the `n` bridges keeps `standing_cpu` cores busy whatever
    it lands; the rest goes to messages at the CPU per message measured less that standing part."""
    served = inputs.python_cpu + inputs.jvm_cpu + inputs.broker_cpu + inputs.postgres_cpu
    per_message = max(served - inputs.bridges * inputs.standing_cpu / inputs.rate, 1e-9)
    return max(free_cores - n * inputs.standing_cpu, 0.0) / per_message


def predict(inputs: Inputs, n: int, free_cores: float | None = None,
            shared_machine: bool = True) -> tuple[float, str, dict[str, float]]:
    """(the predicted aggregate rate, the term that sets it, every term) for `n` bridges."""
    each = terms(inputs, n, free_cores, shared_machine)
    limit = min(each, key=lambda k: each[k])
    return each[limit], limit, each


def separate_hosts(inputs: Inputs, n: int, host_cores: int,
                   latency: float = 1.0) -> tuple[float, str, dict[str, float]]:
    """`n` bridges each on a host of its own with `host_cores` cores (the broker, PostgreSQL and the
    table shared): one bridge's rate is bounded by its Python (the GIL), its unit round trip and its
    host's cores over its own CPU per message (Python and JVM). A bridge's bulks are not N = 1's here:
    a bridge closes a bulk at the latest at its type's `latency` (`mqbridge.bulks.sizing`), so with its
    share of what the other terms allow it commits about once per `latency`, bulks of share x latency
    rows; the table then takes (its commits/s) x those rows."""
    own = inputs.python_cpu + inputs.jvm_cpu  # per message of one bridge, whichever bridge served it
    each = terms(inputs, n, shared_machine=False)
    each["per bridge"] = n * min(1 / inputs.python_cpu, inputs.in_flight / inputs.receipt_to_commit,
                                 host_cores / own)
    others = min(v for k, v in each.items() if k != "table")
    rows = max(1.0, others / n * latency)
    each["table"] = min(n * inputs.table_commits, inputs.table_log_commits) * rows
    limit = min(each, key=lambda k: each[k])
    return each[limit], limit, each


def error(predicted: float, measured: float) -> float:
    """The prediction's error in % of the measured rate."""
    return 100 * (predicted - measured) / measured
