"""Files the bridge trusts (mqbridge.strict_modes): the state_dir and the ledger are created private
whatever the umask, and refused when another user may change them — the plugin folders' rule."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from mqbridge.errors import ConfigError
from mqbridge.landing.ledger import SqliteLedger, ledger_path, owner_id
from mqbridge.landing.publication import private_staging, staging_dir
from mqbridge.strict_modes import check_trusted, private_dir, private_file
from tests.support.memory import RecordingExecutor, memory_app, memory_config

pytestmark = pytest.mark.skipif(os.name == "nt", reason="no POSIX modes on Windows")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(params=[0o000, 0o022, 0o277])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def test_private_paths_are_0700_and_0600_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    directory = private_dir(tmp_path / "a" / "state")
    assert mode(directory) == 0o700
    assert private_file(directory / "f") and mode(directory / "f") == 0o600
    assert not private_file(directory / "f")  # there already: left as it is


def test_an_existing_directory_keeps_its_mode(tmp_path: Path) -> None:
    (tmp_path / "shared").mkdir(mode=0o755)
    os.chmod(tmp_path / "shared", 0o755)
    private_dir(tmp_path / "shared")
    assert mode(tmp_path / "shared") == 0o755


def test_a_new_ledger_and_its_state_dir_are_private(tmp_path: Path, umask: int) -> None:
    ledger = SqliteLedger.open(ledger_path(tmp_path / "state"), owner=owner_id())
    try:
        ledger.heartbeat()  # a write: the -wal file exists now
        assert mode(tmp_path / "state") == 0o700 and mode(Path(ledger.path)) == 0o600
        assert ledger.created
        wal = Path(str(ledger.path) + "-wal")
        assert not wal.exists() or mode(wal) & 0o077 == 0  # SQLite gives it the database's mode
    finally:
        ledger.close()


@pytest.mark.parametrize(("bits", "said"), [(0o775, "group-writable (mode 0775)"),
                                            (0o777, "world-writable (mode 0777)")])
def test_a_state_dir_others_may_write_is_refused_before_the_ledger_is_opened(
        tmp_path: Path, bits: int, said: str) -> None:
    state = tmp_path / "state"
    SqliteLedger.open(ledger_path(state), owner=owner_id()).close()
    before = ledger_path(state).read_bytes()
    os.chmod(state, bits)
    with pytest.raises(ConfigError) as info:
        SqliteLedger.open(ledger_path(state), owner=owner_id())
    message = str(info.value)
    assert message.startswith(f"state_dir {state} is {said}, owner uid {os.geteuid()}")
    assert message.endswith(f"(fix: chmod go-w {state})")
    assert ledger_path(state).read_bytes() == before  # not opened, not written


def test_a_ledger_file_others_may_write_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    SqliteLedger.open(ledger_path(state), owner=owner_id()).close()
    os.chmod(ledger_path(state), 0o666)
    with pytest.raises(ConfigError, match=rf"^ledger {ledger_path(state)} is world-writable \(mode 0666\).*"
                                          rf"fix: chmod go-w {ledger_path(state)}\)$"):
        SqliteLedger.open(ledger_path(state), owner=owner_id())


def test_a_path_another_user_owns_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    if os.geteuid() == 0:  # root can give it away
        os.chown(state, 4242424, 4242424)
        service, owner = 0, 4242424
    else:  # the service user is someone else: this test's own directory is another user's to it
        service, owner = 4242424, os.geteuid()
    with pytest.raises(ConfigError, match=rf"^state_dir {state} is owned by uid {owner}\b.*, not by the service "
                                          rf"user \(uid {service}\b.*\) or root, mode 0700: .*"
                                          rf"\(fix: chown \S+ {state}\)$"):
        check_trusted(state, "state_dir", uid=service)


def test_a_private_staging_directory_hides_staged_files(tmp_path: Path, umask: int) -> None:
    table = tmp_path / "warehouse" / "orders"
    staging = staging_dir(table, owner_id(), "b1")
    private_staging(staging)
    assert mode(staging.parents[1]) == 0o700 and mode(staging.parent) == 0o700
    assert table.is_dir() and mode(table) == 0o777 & ~umask  # readers of the table need it


def test_the_bridge_checks_its_state_dir_whatever_keeps_the_ledger() -> None:
    # Given a bridge without the SQLite ledger (at-least-once here; a PostgreSQL ledger alike)
    cfg, _broker = memory_config()
    cfg.bridge.exactly_once = False
    os.chmod(cfg.bridge.state_dir, 0o777)
    with pytest.raises(ConfigError, match=rf"^state_dir {cfg.bridge.state_dir} is world-writable"):
        memory_app(cfg, RecordingExecutor())


def test_a_private_dir_under_a_regular_file_names_the_file(tmp_path: Path) -> None:
    # Given a table path that is a regular file
    blocker = tmp_path / "orders"
    blocker.write_text("not a directory")
    # When a staging directory under it is made private, the error names the file, not mkdir's "File exists"
    with pytest.raises(NotADirectoryError) as caught:
        private_dir(blocker / "_staging" / "owner")
    assert caught.value.filename == str(blocker) and "Not a directory" in str(caught.value)
