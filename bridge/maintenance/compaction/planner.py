"""The plan of one container: a pure decision among nothing, drop, delete, copy (-and-drop) and
compact, from what the container holds, the triggers of `[compaction]` and the learned costs.

    every row designated (retention)          → drop (one rename)
    designated rows, retention due*            → delete or copy, whichever the cost model says; copy
                                                 when the container also has too many small files
                                                 (copy rewrites it into few files: it compacts too)
    small files ≥ small_files, disk not low    → compact (sorted by put_timestamp across the container)
    otherwise                                  → nothing, with the reason

    * more than `[purge] threshold` of its rows designated, or the disk is low (`min_free_disk`):
      then the retention purge runs on every container with designated rows, oldest first.

A container holding files of a bulk not yet recorded as published is never purged (its owner, or the
recovery that finishes a dead owner's bulk, still needs them where they are): nothing, with the
reason. A compaction rewrites the other files and carries those by name (`mqbridge.maintenance.compaction.compactor`).

Low disk never deletes a row younger than its type's retention: mqbridge only removes what the
operator designated. It stops compaction, which needs room for a second copy of the container until
its swap, and makes the retention purge run now, whatever its threshold.
"""

from __future__ import annotations

from dataclasses import dataclass

from mqbridge.maintenance.engine.costs import CostModel

#: The actions of a plan, in the words `mqbridge compact --dry-run` prints.
ACTIONS = ("none", "drop", "delete", "copy", "compact")


@dataclass(frozen=True)
class Facts:
    """What a container holds: its files (how many of them are small), rows and bytes; of the
    retention designation (if any), the rows designated and the rows of the files that hold both
    designated and surviving rows (what delete rewrites); the bulks with a file in it that may not be
    recorded as published yet (`mqbridge.landing.publication.unpublished_bulks`)."""

    put_date: str
    files: int
    small_files: int
    rows: int
    bytes: int
    designated: int = 0
    rows_rewritten: int = 0
    unpublished: tuple[str, ...] = ()


@dataclass(frozen=True)
class Policy:
    """The triggers: small files per container, whether the disk is low, the purge's threshold."""

    small_files: int
    low_disk: bool = False
    purge_threshold: float = 0.5


@dataclass(frozen=True)
class Plan:
    """What to do with one container, why, and the cost model's estimate of it (seconds)."""

    facts: Facts
    action: str  # one of ACTIONS
    reason: str
    estimated_seconds: float = 0.0

    @property
    def put_date(self) -> str:
        return self.facts.put_date


def decide(facts: Facts, policy: Policy, model: CostModel) -> Plan:
    """The plan of one container (see the module docstring); reads the model, never changes it."""
    if facts.rows == 0 or facts.files == 0:
        return Plan(facts, "none", "empty")
    plan = _decide(facts, policy, model)
    if facts.unpublished and plan.action in ("drop", "delete", "copy"):
        return Plan(facts, "none", f"{plan.reason}, but it holds files of bulk {', '.join(facts.unpublished)}, "
                                   "prepared and not yet recorded as published: the purge waits until its bridge (or "
                                   "that bridge's next start) has finished it")
    return plan


def _decide(facts: Facts, policy: Policy, model: CostModel) -> Plan:
    """The plan of a container with rows, by its retention designation and its files."""
    if facts.designated >= facts.rows:
        return Plan(facts, "drop", "retention: every row designated")
    if facts.designated > 0 and (policy.low_disk or facts.designated > policy.purge_threshold * facts.rows):
        estimate = model.estimate(facts.rows, facts.designated, facts.rows_rewritten)
        why = "low disk, retention" if policy.low_disk else "retention"
        if estimate.strategy == "delete" and facts.small_files >= policy.small_files:
            return Plan(facts, "copy", f"{why}; {facts.small_files} small files: copy compacts them too",
                        estimate.copy_seconds)
        seconds = estimate.copy_seconds if estimate.strategy == "copy" else estimate.delete_seconds
        return Plan(facts, estimate.strategy, f"{why}: {facts.designated}/{facts.rows} rows designated", seconds)
    if facts.files < 2:
        return Plan(facts, "none", "one file: nothing to merge")
    if facts.small_files < policy.small_files:
        return Plan(facts, "none", f"{facts.small_files} small files, under {policy.small_files}")
    if policy.low_disk:
        return Plan(facts, "none", f"{facts.small_files} small files, but the disk is low: compaction waits")
    return Plan(facts, "compact", f"{facts.small_files} small files (threshold {policy.small_files})",
                model.compact_seconds(facts.rows))
