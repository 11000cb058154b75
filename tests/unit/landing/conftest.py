"""Fixtures of the landing unit tests: an open SQLite ledger."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mqbridge.landing.ledger import Ledger, SqliteLedger, owner_id


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    opened = SqliteLedger.open(tmp_path / "state" / "ledger.sqlite3", owner=owner_id())
    yield opened
    opened.close()
