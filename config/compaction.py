"""`[compaction]`: when the containers (`put_date` partitions) of landed tables are compacted, and how
(`mqbridge.maintenance`, `mqbridge compact`, docs/compaction.md).

Three triggers decide per container: retention (a type's `retention`, the purge's), the number of
small files over `small_files`, and the free space of the warehouse's file system under
`min_free_disk`. Under `min_free_disk` nothing is compacted (a compaction needs room for a second
copy of its container until the swap); the retention purge of the oldest containers runs first,
whatever `[purge] threshold` says.
"""

from __future__ import annotations

from pydantic import Field

from mqbridge.config.base import Duration, Model, Size, parse_size


class CompactionSection(Model):
    """`[compaction]`: the triggers and target of container compaction (docs/compaction.md)."""

    interval: Duration | None = Field(default=None, gt=0, description="Check every table's containers on "
                                      "the bridge's own thread this often; None (default): only "
                                      "`mqbridge compact`")
    target_file_size: Size = Field(default=parse_size("128MB"), gt=0, description="Size of the files a "
                                   "compaction writes (the last one of a container is smaller)")
    small_file_size: Size = Field(default=parse_size("16MB"), gt=0, description="A data file under this "
                                  "size counts as small")
    small_files: int = Field(default=100, ge=2, description="A container with at least this many small files "
                             "is compacted")
    min_free_disk: Size | None = Field(default=None, gt=0, description="Free bytes on the warehouse's file "
                                       "system under which compaction waits and the retention purge of the "
                                       "oldest containers runs first; None: not checked")
    compact_row_seconds: float | None = Field(default=None, gt=0, description="Seconds per row read, sorted "
                                              "and rewritten by a compaction; None: learned from past runs "
                                              "(state_dir, beside the purge's costs)")
