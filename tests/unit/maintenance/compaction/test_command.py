"""`mqbridge compact`'s refusals, said before Spark starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqbridge.cli import main
from tests.support.compaction import compact_bridge


def test_an_unknown_table_is_refused_naming_the_tables_there_are(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    config = compact_bridge().write(tmp_path / "bridge.toml")
    assert main(["compact", "--config", str(config), "--table", "nope", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "--table nope: not a table of the configured types (tables: orders)" in err, err
    assert not (tmp_path / "landing").exists()  # nothing was created


def test_the_help_names_the_options_and_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["compact", "--help"])
    out = capsys.readouterr().out
    assert "--table T" in out and "--dry-run" in out and "2  configuration error" in out
