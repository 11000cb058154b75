"""The files of a container by message type: the rule of every rewrite of a container, the purge's
(`mqbridge.maintenance.purge.purger`: delete and copy) and the compaction's
(`mqbridge.maintenance.compaction.compactor`):
one Spark job per type, over that type's files only, read with their schema (`read_container`).

Why: types that share a table (one `table` for both, or a template that renders one type's table
for another) may declare different columns. Read together, the files' schemas are merged, and every
file written holds the other types' columns too (NULL). At the next start, the schema check
(`mqbridge.landing.schema_check.check_schemas`) compares each type's newest file with that type's
configured schema and refuses the other type's columns as columns it dropped: `mqbridge run` exits 2.

A bulk is one type's, so a landed file holds one type's rows. A file holding rows of several types
(written by a compaction or purge before this rule) is `mixed`: the purge rewrites each such file on
its own, with its own columns, and gives the new file the old one's modification time (the check
reads each type's *newest* file in a container: a rewritten mixed file must not become it); the
compaction carries it as it is.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from mqbridge.landing.tables import file_types


@dataclass(frozen=True)
class TypeGroups:
    """Files of one container: those holding one type's rows, by type (`""`: files without rows or
    without a `message_type` column), and those holding rows of several types."""

    by_type: dict[str, list[Path]]
    mixed: list[Path]

    @property
    def typed(self) -> list[list[Path]]:
        """Each type's files, by type name: what one rewrite reads together."""
        return [self.by_type[t] for t in sorted(self.by_type)]


def type_groups(files: Iterable[Path]) -> TypeGroups:
    """`files` (Parquet files of one container) by the message types of their rows (`file_types`:
    read from the footers' statistics, or from the `message_type` column)."""
    by_type: dict[str, list[Path]] = {}
    mixed: list[Path] = []
    for path in sorted(files):
        types = sorted(file_types(str(path)))
        if len(types) > 1:
            mixed.append(path)
        else:
            by_type.setdefault(types[0] if types else "", []).append(path)
    return TypeGroups(by_type, mixed)
