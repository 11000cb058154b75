"""The commands on a configuration whose warehouse is an object store (s3a://), without a store: those
that read its Delta tables (`tables`, `replay`, `ledger --verify` / `--abandon`, `purge`, `compact`) stop
with one line naming an S3 key left unresolved (exit 2) rather than reading the store without it or
`<cwd>/s3a:/bucket`; `where` answers from the ledger and notes why the Delta table was not read (its key
unresolved; its endpoint down, said within a second); `check-config` does not test an object store as a
directory and names the S3A jars when they are missing. (Reading the tables on a real S3 server and on
HDFS: tests/integration/test_delta_store_maintenance.py.)"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from mqbridge.cli import main
from mqbridge.commands.where import from_files as where_from_files
from mqbridge.config import load_config
from mqbridge.landing import log_store
from mqbridge.landing.ledger import SqliteLedger, TableTransaction, owner_id
from tests.support.configs import orders

WAREHOUSE = "s3a://landing-bucket/mqbridge"


def write(tmp_path: Path, jars: bool = True) -> Path:
    jars_dir = tmp_path / "jars"
    for folder, name in (("delta", "delta-spark_4.1_2.13-4.4.0.jar"), ("delta", "delta-storage-4.4.0.jar"),
                         ("delta", log_store.JAR_NAME), ("s3", "hadoop-aws-3.4.2.jar")):
        if jars or folder == "delta":
            (jars_dir / folder).mkdir(parents=True, exist_ok=True)
            (jars_dir / folder / name).write_bytes(b"")
    return (orders().set("bridge", state_dir=str(tmp_path / "state"), plugin_dirs=[])
            .set("spark", warehouse=WAREHOUSE, table_format="delta", jars_dir=str(jars_dir))
            .write(tmp_path / "bridge.toml"))


def with_keys(tmp_path: Path, endpoint: str = "http://127.0.0.1:9") -> Path:
    """`write`'s configuration with S3A keys, the secret from the environment (S3_SECRET)."""
    text = (write(tmp_path).read_text() + '\n[spark.conf]\n'
            f'"spark.hadoop.fs.s3a.endpoint" = "{endpoint}"\n'
            '"spark.hadoop.fs.s3a.path.style.access" = "true"\n'
            '"spark.hadoop.fs.s3a.access.key" = "AKIDEXAMPLE"\n'
            '"spark.hadoop.fs.s3a.secret.key" = "${ENV:S3_SECRET}"\n')
    (tmp_path / "bridge.toml").write_text(text)
    return tmp_path / "bridge.toml"


@pytest.mark.parametrize("argv", [
    ["tables"],
    ["replay", "--table", "orders", "--to", "/queue/again"],
    ["ledger", "--verify"],
    ["ledger", "--abandon", "orders-1"],
    ["purge", "--older-than", "30d"],
    ["compact"],
])
def test_a_command_that_reads_the_tables_names_an_unresolved_s3_key_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> None:
    monkeypatch.delenv("S3_SECRET", raising=False)
    config = with_keys(tmp_path)
    (tmp_path / "state").mkdir()
    SqliteLedger.open(tmp_path / "state" / "ledger.sqlite3", owner=owner_id()).close()
    assert main([argv[0], "--config", str(config), *argv[1:]]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f"mqbridge: configuration error: {config}: spark.conf")
    assert "S3_SECRET" in captured.err and captured.err.count("\n") == 1, captured.err


def published(tmp_path: Path, cfg: Any) -> dict[str, Any]:
    ledger = SqliteLedger.open(tmp_path / "state" / "ledger.sqlite3", owner=owner_id())
    try:
        ledger.prepare("orders-1", "orders", (), ["ID:1"], transaction=TableTransaction("mqbridge:x", 1))
        ledger.mark_published("orders-1")
        return where_from_files(cfg, "ID:1", "no bridge in a unit test")
    finally:
        ledger.close()


def test_where_answers_from_the_ledger_and_says_why_the_table_was_not_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("S3_SECRET", raising=False)
    doc = published(tmp_path, load_config(with_keys(tmp_path), secrets=False))
    assert doc["state"] == "landed" and doc["landed"]["bulk"] == "orders-1"
    assert any(n.startswith("the tables are not read, only the ledger: ") and "S3_SECRET" in n
               for n in doc["notes"]), doc["notes"]


def test_where_on_an_endpoint_that_is_down_says_so_within_a_second(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("S3_SECRET", "s3-secret-that-must-not-show-0123")
    started = time.monotonic()
    doc = published(tmp_path, load_config(with_keys(tmp_path, "http://127.0.0.1:9")))  # nothing listens on 9
    assert time.monotonic() - started < 5.0
    assert doc["state"] == "landed" and doc["landed"]["bulk"] == "orders-1"
    [note] = [n for n in doc["notes"] if f"{WAREHOUSE}/orders could not be read" in n]
    assert "127.0.0.1:9" in note and "Connection refused" in note and "s3-secret-that-must-not-show-0123" not in note
    assert "\x1b" not in note and "\n" not in note  # delta-rs's coloured chain of causes, as one line


def test_check_config_does_not_test_an_object_store_as_a_directory(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-config", "--config", str(write(tmp_path))]) == 0, capsys.readouterr()
    assert "warehouse" not in capsys.readouterr().out


def test_check_config_names_the_missing_s3a_jars(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-config", "--config", str(write(tmp_path, jars=False))]) != 0
    out = capsys.readouterr()
    assert "spark.jars_dir: [spark] warehouse = \"s3a://...\" needs Hadoop's S3A connector" in out.out + out.err
    assert "mqbridge jars --config <your configuration file> s3" in out.out + out.err
