"""The source contract on the in-process broker (mqbridge.listeners.memory): no broker needed."""

from __future__ import annotations

from tests.support.contract import SourceContract
from tests.support.harnesses import MemoryHarness


class TestMemory(SourceContract):
    harness = MemoryHarness
