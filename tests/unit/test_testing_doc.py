"""docs/testing.md is what `python -m tests.support.testing_doc` writes from the test modules."""

from __future__ import annotations

from tests.support.testing_doc import ROOT, render


def test_the_test_evidence_in_docs_is_up_to_date() -> None:
    assert (ROOT / "docs" / "testing.md").read_text() == render(), (
        "docs/testing.md is out of date: run `.venv/bin/python -m tests.support.testing_doc > docs/testing.md`")


def test_every_integration_module_is_listed_with_what_it_proves() -> None:
    text = render()
    for path in (ROOT / "tests" / "integration").glob("test_*.py"):
        line = next(line for line in text.splitlines() if f"[`{path.name}`]" in line)
        assert len(line.split("): ", 1)[1]) > 20, f"{path.name} has no docstring saying what it proves"
