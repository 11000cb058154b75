"""The steps every rewrite of a container takes, whichever policy asked for it (the purge's delete
and copy, the compaction): a work directory of its own under `<table>/_purge/` (readers skip `_`
names), removed when the rewrite ends, whatever way it ends; the new container in it with a
journal naming the live one; the marker that tells the recovery the swap happened
(`mqbridge.maintenance.engine.swap`); and the files carried into the new container as they are.

A rewrite: `with container_work(table, put_date) as work`, `new = begin(work, container, strategy)`,
write the rows into `new`, `marker = seal(work, new)`, then under the table's lock `carry` what must
keep its name, `exchange(new, container)` and `record_purge`; last, remove the marker from the
container now live.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from mqbridge.maintenance.engine.swap import JOURNAL, MARKER, WORK, finish, fsync_dir, write_json


@contextmanager
def container_work(table: Path, put_date: str) -> Iterator[Path]:
    """A fresh work directory for rewriting `table`'s container `put_date`; removed on leaving (with the
    old container after a swap, or the unused new one after an error)."""
    work = table / WORK / f"{uuid.uuid4().hex[:12]}-{put_date}"
    try:
        yield work
    finally:
        finish(work)


def begin(work: Path, container: Path, strategy: str) -> Path:
    """Create the new container's directory in `work` and the journal naming `container` and
    `strategy` (what the recovery records a rolled-forward swap as); the new directory."""
    new = work / "new"
    new.mkdir(parents=True)
    write_json(work / JOURNAL, {"container": container.name, "strategy": strategy,
                                "started": datetime.now(timezone.utc).isoformat()})
    return new


def seal(work: Path, new: Path) -> str:
    """Put the marker of `work` into the new container, durably: once the container is live, the
    marker says the swap happened (`recover_purges` rolls forward). The marker's name."""
    marker = MARKER + work.name
    (new / marker).touch()
    fsync_dir(new)
    return marker


def carry(container: Path, new: Path, names: Iterable[str]) -> None:
    """Hard-link the files `names` of `container` into `new`, under their names, as they are."""
    for name in names:
        os.link(container / name, new / name)
