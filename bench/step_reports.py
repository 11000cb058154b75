"""What `bench/steady.py` prints from the timings `bench/steps/sitecustomize.py` writes inside the bridge
(`--time-steps`: each write's and each unit of work's steps; `--table-format delta`: each Delta commit,
placed further by the table's own file modification times). Reading those files is one concept; running
the bridge and the reference consumers is steady.py's."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote


def write_steps(workdir: Path, start: float, end: float) -> str:
    """The mean wall time of each step of the writes that started between `start` and `end`
    (perf_counter, the same clock in the child), from the lines bench/steps/sitecustomize.py wrote."""
    spent: dict[str, float] = {}
    for path in workdir.glob("steps.*"):
        for line in path.read_text().splitlines():
            step, at, seconds = line.split()[:3]
            if start <= float(at) <= end:
                spent[step] = spent.get(step, 0.0) + float(seconds)
    writes = sum(1 for path in workdir.glob("steps.*") for line in path.read_text().splitlines()
                 if line.startswith("write ") and start <= float(line.split()[1]) <= end)
    if not writes:
        return "    a write's steps over N: no write started within N"
    mean = {k: v / writes for k, v in spent.items()}
    rest = mean.get("write", 0.0) - sum(mean.get(k, 0.0) for k in ("arrow", "plan", "job", "land"))
    timed = timed_delta_commits(workdir)
    if timed:  # a Delta table: the write's Spark job (`job`, spark_guarded) is its commit, run by Landing.commit
        commit = sum(c.seconds for c in timed.values() if start <= c.start <= end) / writes
        return (f"    a write's steps over N (mean of {writes}): {mean.get('write', 0.0):.2f} s = Arrow table "
                f"{mean.get('arrow', 0.0):.2f} + plan {mean.get('plan', 0.0):.2f} (handoff file "
                f"{mean.get('handoff', 0.0):.2f}) + Spark jobs {mean.get('job', 0.0):.2f} (of it the Delta commit "
                f"{commit:.2f}) + prepare {mean.get('prepare', 0.0):.2f} + mark published {mean.get('mark', 0.0):.2f} "
                f"+ the rest {rest - mean.get('prepare', 0.0) - mean.get('mark', 0.0):.2f}")
    return (f"    a write's steps over N (mean of {writes}): {mean.get('write', 0.0):.2f} s = Arrow table "
            f"{mean.get('arrow', 0.0):.2f} + plan {mean.get('plan', 0.0):.2f} (handoff file "
            f"{mean.get('handoff', 0.0):.2f}) + Spark job {mean.get('job', 0.0):.2f} + landing "
            f"{mean.get('land', 0.0):.2f} (footers {mean.get('footers', 0.0):.2f}, prepare "
            f"{mean.get('prepare', 0.0):.2f}, publish {mean.get('publish', 0.0):.2f}, mark published "
            f"{mean.get('mark', 0.0):.2f}) + the rest {rest:.2f}")


@dataclass
class DeltaCommit:
    """One Delta commit of a bulk: timed in the bridge (perf_counter and wall clock), placed in the
    table's log by its user metadata (the bulk id)."""

    bulk_id: str
    start: float  # perf_counter
    seconds: float
    wall_start: float
    wall_end: float
    version: int | None = None
    rows: int = 0
    data_written: float | None = None  # wall: the newest of its data files' modification times
    log_written: float | None = None  # wall: its `_delta_log/<version>.json`
    checksum_written: float | None = None  # wall: its `_delta_log/<version>.crc` (the table's state after it)
    checkpoint_written: float | None = None  # wall: the checkpoint of its version, if it wrote one


def timed_delta_commits(workdir: Path) -> dict[str, DeltaCommit]:
    """The Delta commits the bridge timed (`delta.<pid>` lines of bench/steps/sitecustomize.py), by bulk id."""
    commits: dict[str, DeltaCommit] = {}
    for path in workdir.glob("delta.*"):
        for line in path.read_text().splitlines():
            _step, at, seconds, _cpu, _thread, bulk_id, wall_start, wall_end = line.split()
            if bulk_id != "probe":  # the start-up probe's commit to a table of its own
                commits[bulk_id] = DeltaCommit(bulk_id, float(at), float(seconds), float(wall_start), float(wall_end))
    return commits


def delta_commits(commits: dict[str, DeltaCommit], table: Path) -> list[DeltaCommit]:
    """The timed Delta commits (by bulk id: `timed_delta_commits`) found in the table's log, each with
    its version, rows and the modification times of its data files, log entry, checksum and checkpoint."""
    log_dir = table / "_delta_log"
    for entry in sorted(log_dir.glob("*.json")) if log_dir.is_dir() else []:
        if not entry.stem.isdigit():
            continue
        version = int(entry.stem)
        actions = [json.loads(line) for line in entry.read_text().splitlines() if line.strip()]
        info: dict[str, Any] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        commit = commits.get(info.get("userMetadata") or "")
        if commit is None:
            continue
        commit.version = version
        commit.rows = int(info.get("operationMetrics", {}).get("numOutputRows", 0))
        files = [table / unquote(a["add"]["path"]) for a in actions if "add" in a]
        times = [f.stat().st_mtime for f in files if f.exists()]
        commit.data_written = max(times) if times else None
        commit.log_written = entry.stat().st_mtime
        checksum = log_dir / f"{version:020d}.crc"
        commit.checksum_written = checksum.stat().st_mtime if checksum.exists() else None
        checkpoints = list(log_dir.glob(f"{version:020d}.checkpoint*"))
        if checkpoints:
            commit.checkpoint_written = max(c.stat().st_mtime for c in checkpoints)
    return sorted((c for c in commits.values() if c.version is not None), key=lambda c: c.start)


def delta_report(commits: list[DeltaCommit], start: float, end: float, writes: float, write_seconds: float) -> str:
    """What the Delta commits of the writes between `start` and `end` (perf_counter) cost, per write
    and per row, against the writes' time (`write_seconds` over `writes`, from /metrics); the parts of
    a commit; and the commits that wrote a checkpoint against the others (over the whole run but its
    first three versions, the JVM's warm-up: checkpoints come every tenth commit)."""
    def mean(values: list[float]) -> float:
        return sum(values) / len(values) if values else float("nan")

    over_n = [c for c in commits if start <= c.start <= end]
    if not over_n:
        return "    Delta commits over N: none timed (bench/steps/sitecustomize.py not loaded?)"
    seconds = sum(c.seconds for c in over_n)
    rows = sum(c.rows for c in over_n)
    write = write_seconds / max(writes, 1)
    placed = [c for c in over_n if c.data_written is not None and c.log_written is not None]
    data = mean([c.data_written - c.wall_start for c in placed if c.data_written is not None])
    log_entry = mean([c.log_written - c.data_written for c in placed
                      if c.log_written is not None and c.data_written is not None])
    checksum = mean([c.checksum_written - c.log_written for c in placed
                     if c.checksum_written is not None and c.log_written is not None])
    after = mean([c.wall_end - c.log_written for c in placed if c.log_written is not None])
    text = (f"    Delta commits over N: {len(over_n)}, {seconds / len(over_n):.2f} s each of the write's {write:.2f} s "
            f"(the rest {write - seconds / len(over_n):.2f} s); {rows / len(over_n):,.0f} rows each, "
            f"{seconds / max(rows, 1) * 1e6:.0f} us per row\n"
            f"    a commit's parts (mean of {len(placed)}, by the table's file times): until its data files are "
            f"written {data:.2f} s (below 0: written before its turn, `delta_commit.stage_raw`), then its log "
            f"entry {log_entry:.3f} s, then until the write returns "
            f"{after:.3f} s (of it until the checksum file {checksum:.3f} s)")
    late = [c for c in commits if c.version is not None and c.version >= 3]
    checkpointing = [c for c in late if c.checkpoint_written is not None and c.log_written is not None]
    others = [c for c in late if c.checkpoint_written is None and c.log_written is not None]
    if checkpointing and others:
        def parts(group: list[DeltaCommit]) -> str:
            return (f"{mean([c.seconds for c in group]):.2f} s ({mean([float(c.rows) for c in group]):,.0f} rows), "
                    f"after the log entry {mean([c.wall_end - c.log_written for c in group if c.log_written]):.3f} s")
        checkpoint = mean([c.checkpoint_written - c.log_written for c in checkpointing
                           if c.checkpoint_written is not None and c.log_written is not None])
        text += (f"\n    commits writing a checkpoint (versions {', '.join(str(c.version) for c in checkpointing)}): "
                 f"{parts(checkpointing)}, the checkpoint file {checkpoint:.3f} s "
                 f"after the log entry; the other {len(others)} (versions >= 3): {parts(others)}")
    elif late:
        text += f"\n    no checkpoint among the {len(late)} commits of versions >= 3"
    return text


def unit_steps(workdir: Path, start: float, end: float) -> str:
    """Where a unit of work's time goes, for the units read between `start` and `end`: its read, its
    hand-over, the collector and the write until its last result (ready), the wait for the listener
    to come to it, and its finish; then the share of the listener threads' time in each step, and
    why bulks closed (mean rows and age of the oldest message). From bench/steps/sitecustomize.py."""
    # a line still being written when the file is read has fewer than the five fields every line begins with
    rows = [fields for path in workdir.glob("steps.*") for line in path.read_text().splitlines()
            if len(fields := line.split()) >= 5]
    by_id: dict[str, dict[str, tuple[float, float]]] = {}
    receives: dict[str, list[tuple[float, float]]] = {}
    busy: dict[str, dict[str, float]] = {}
    closes: dict[str, list[tuple[int, float]]] = {}
    for step, at, seconds, _cpu, thread, *detail in rows:
        t0, dt = float(at), float(seconds)
        if not start <= t0 <= end:
            continue
        if step in ("receive", "process", "finish", "await", "commit"):
            spent = busy.setdefault(thread, {})
            spent[step] = spent.get(step, 0.0) + dt
        if step == "receive" and detail and int(detail[0]):
            receives.setdefault(thread, []).append((t0, dt))
        if step in ("submit", "ready", "finish") and detail:
            by_id.setdefault(detail[0], {})[step] = (t0, dt)
        if step == "close" and len(detail) == 3:
            closes.setdefault(detail[0], []).append((int(detail[1]), float(detail[2])))
    units = [u for u in by_id.values() if len(u) == 3]
    if not units or not busy:
        return "    a unit's steps over N: no unit finished within N"
    def mean(values: list[float]) -> float:
        return sum(values) / len(values) if values else 0.0
    # ids are reused once a results object is freed: only triples in order count
    units = [u for u in units if u["submit"][0] <= u["ready"][0] and u["submit"][0] <= u["finish"][0]]
    to_ready = mean([u["ready"][0] - (u["submit"][0] + u["submit"][1]) for u in units])
    lag = mean([max(0.0, u["finish"][0] - u["ready"][0]) for u in units])
    early = mean([max(0.0, u["ready"][0] - u["finish"][0]) for u in units])
    finish_after = mean([u["finish"][0] + u["finish"][1] - max(u["ready"][0], u["finish"][0]) for u in units])
    wall = end - start
    share = {step: mean([spent.get(step, 0.0) / wall for spent in busy.values()])
             for step in ("receive", "process", "finish", "await", "commit")}
    reads = [dt for values in receives.values() for _t, dt in values]
    text = (f"    a unit over N (mean of {len(units)}): read {mean(reads):.3f} s, submitted to its last result "
            f"{to_ready:.3f} s, result to the listener taking it {lag:.3f} s (listener waiting {early:.3f} s), "
            f"from then to committed {finish_after:.3f} s\n"
            f"    listener threads ({len(busy)}) over N: receive {share['receive']:.0%}, process "
            f"{share['process']:.0%}, finish {share['finish']:.0%} (of it waiting for results "
            f"{share['await']:.0%}, commit {share['commit']:.0%})\n"
            "    bulks closed over N (rows, oldest message's age): "
            + ", ".join(f"{reason} {len(v)} ({mean([r for r, _ in v]):,.0f}, {mean([a for _, a in v]):.2f} s)"
                        for reason, v in sorted(closes.items())))
    return text
