"""The commands on a configuration whose warehouse is an object store (s3a://): those that read a
local warehouse (`tables`, `replay`, `ledger --verify` / `--abandon`, `purge`, `compact`) stop with one
line saying so (exit 2) instead of reading `<cwd>/s3a:/bucket`; `where` answers from the ledger and says
that the Delta table was not read; `check-config` does not test an object store as a directory and
names the S3A jars when they are missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqbridge.cli import main
from mqbridge.config import load_config
from mqbridge.landing.ledger import SqliteLedger, TableTransaction, owner_id
from mqbridge.tracing.where import Locator
from tests.support.configs import orders

WAREHOUSE = "s3a://landing-bucket/mqbridge"


def write(tmp_path: Path, jars: bool = True) -> Path:
    jars_dir = tmp_path / "jars"
    for folder, name in (("delta", "delta-spark_4.2_2.13-4.4.0.jar"), ("delta", "delta-storage-4.4.0.jar"),
                         ("s3", "hadoop-aws-3.5.0.jar")):
        if jars or folder == "delta":
            (jars_dir / folder).mkdir(parents=True, exist_ok=True)
            (jars_dir / folder / name).write_bytes(b"")
    return (orders().set("bridge", state_dir=str(tmp_path / "state"), plugin_dirs=[])
            .set("spark", warehouse=WAREHOUSE, table_format="delta", jars_dir=str(jars_dir))
            .write(tmp_path / "bridge.toml"))


@pytest.mark.parametrize(("argv", "command"), [
    (["tables"], "`mqbridge tables`"),
    (["replay", "--table", "orders", "--to", "/queue/again"], "`mqbridge replay`"),
    (["ledger", "--verify"], "`mqbridge ledger --verify`"),
    (["ledger", "--abandon", "orders-1"], "`mqbridge ledger --abandon`"),
    (["purge", "--older-than", "30d"], "`mqbridge purge`"),
    (["compact"], "`mqbridge compact`"),
])
def test_a_command_that_reads_a_local_warehouse_stops_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], command: str) -> None:
    config = write(tmp_path)
    assert main([argv[0], "--config", str(config), *argv[1:]]) == 2
    captured = capsys.readouterr()
    assert captured.err == (f"mqbridge: configuration error: {config}: spark.warehouse: {command} reads a local "
                            f"warehouse directory; {WAREHOUSE} is on s3a://, which {command} does not support yet "
                            "(read its Delta tables with Spark or delta-rs)\n")


def test_where_answers_from_the_ledger_and_says_the_table_was_not_read(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path))
    ledger = SqliteLedger.open(tmp_path / "state" / "ledger.sqlite3", owner=owner_id())
    try:
        ledger.prepare("orders-1", "orders", (), ["ID:1"], transaction=TableTransaction("mqbridge:x", 1))
        ledger.mark_published("orders-1")
        doc = Locator(cfg.listeners, cfg.bridge.dedupe_window, ledger=ledger,
                      warehouse=cfg.resolve_warehouse()).locate("ID:1")
    finally:
        ledger.close()
    assert doc["state"] == "landed" and doc["landed"]["bulk"] == "orders-1"
    assert f"the Delta table {WAREHOUSE}/orders is not read (on s3a://, not supported by this lookup yet): its " \
           "version and whether a purge removed the row are not said" in doc["notes"]


def test_check_config_does_not_test_an_object_store_as_a_directory(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-config", "--config", str(write(tmp_path))]) == 0, capsys.readouterr()
    assert "warehouse" not in capsys.readouterr().out


def test_check_config_names_the_missing_s3a_jars(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-config", "--config", str(write(tmp_path, jars=False))]) != 0
    out = capsys.readouterr()
    assert "spark.jars_dir: [spark] warehouse = \"s3a://...\" needs Hadoop's S3A connector" in out.out + out.err
    assert "mqbridge jars --config <your configuration file> s3" in out.out + out.err
