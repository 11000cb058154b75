"""The driver JVM's class-data archive in state_dir (mqbridge.landing.class_archive): which options a
driver gets, and how a written archive is put in place."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqbridge.errors import SparkUnavailableError
from mqbridge.landing import class_archive


def test_a_driver_maps_the_archive_only_when_state_dir_has_one(tmp_path: Path) -> None:
    assert class_archive.java_options(None) == "" and class_archive.java_options(tmp_path) == ""
    path = class_archive.archive_path(tmp_path)
    path.write_bytes(b"archive")
    options = class_archive.java_options(tmp_path).split()
    assert options[0] == f"-XX:SharedArchiveFile={path}" and "-Xlog:cds=off" in options


def test_the_key_names_pyspark_and_java_so_an_upgrade_uses_no_old_archive(tmp_path: Path) -> None:
    name = class_archive.archive_path(tmp_path).name
    assert name.startswith(class_archive.PREFIX) and name.endswith(class_archive.SUFFIX)
    assert len(name) == len(class_archive.PREFIX) + 12 + len(class_archive.SUFFIX)
    assert class_archive.archive_key() == class_archive.archive_key()  # stable between starts


def test_install_makes_it_private_renames_it_and_removes_other_keys(tmp_path: Path) -> None:
    old = tmp_path / f"{class_archive.PREFIX}0123456789ab{class_archive.SUFFIX}"
    old.write_bytes(b"old")
    temporary = class_archive.temporary_path(tmp_path)
    temporary.write_bytes(b"new archive")
    temporary.chmod(0o644)
    final = class_archive.install(temporary, tmp_path)
    assert final == class_archive.archive_path(tmp_path) and final.read_bytes() == b"new archive"
    assert oct(final.stat().st_mode & 0o777) == "0o600"
    assert not old.exists() and not temporary.exists()


def test_install_says_so_when_the_jvm_wrote_nothing(tmp_path: Path) -> None:
    with pytest.raises(SparkUnavailableError, match="wrote no class-data archive"):
        class_archive.install(class_archive.temporary_path(tmp_path), tmp_path)
