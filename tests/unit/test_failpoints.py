"""The behaviour failpoints (`failpoints.active`): once, or the first N times with `point:N`."""

from __future__ import annotations

import pytest

from mqbridge import failpoints


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(failpoints, "_fired", set())
    monkeypatch.setattr(failpoints, "_reached", {})


@pytest.mark.parametrize(("wanted", "acts"), [
    ("spark_write_hang", [True, False, False]),
    ("spark_write_hang:2", [True, True, False]),
    ("delta_create_hang", [False, False, False]),
])
def test_a_behaviour_point_acts_once_or_the_first_n_times(monkeypatch: pytest.MonkeyPatch, wanted: str,
                                                          acts: list[bool]) -> None:
    monkeypatch.setenv(failpoints.ENVIRONMENT_VARIABLE, wanted)
    assert [failpoints.active("spark_write_hang") for _ in acts] == acts
