"""The free space of the warehouse's file system, which both maintenance policies read: the compaction's
`[compaction] min_free_disk` guard and the purge's `[purge] min_free_disk` designation."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path


def free_bytes(path: Path) -> int:
    """Free bytes (for an unprivileged user) of the file system `path` (or its nearest existing
    parent) is on."""
    while not path.exists() and path != path.parent:
        path = path.parent
    with contextlib.suppress(OSError):
        return shutil.disk_usage(path).free
    return 0
