"""Files the bridge trusts, checked like sshd's StrictModes, and created so that they pass.

What the bridge runs or believes — drop-in plugin files (`mqbridge.plugins.discovery`), the
`state_dir` and the landing ledger in it — must not be changeable by another local user: each must be
owned by the service user (the effective uid) or root and not be writable by group or others.
Whoever could write the ledger could make the bridge skip messages as landed or, at recovery, rename
files. The bridge creates its own private paths 0700 (directories) and 0600 (files) whatever the
umask, so they pass; an existing path is checked, never changed.

Windows has no such mode bits (folder ACLs apply): nothing is checked there.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

from mqbridge.errors import ConfigError

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def user_name(uid: int) -> str | None:
    """The login name of `uid`, None when unknown."""
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return None


def owner_name(uid: int) -> str:
    """"uid 1000 (alice)", or "uid 1000" when the name is unknown."""
    name = user_name(uid)
    return f"uid {uid} ({name})" if name else f"uid {uid}"


def service_uid() -> int:
    """The user the bridge runs as (0 where there are no uids)."""
    return os.geteuid() if hasattr(os, "geteuid") else 0


def unsafe_reason(st: os.stat_result, uid: int, *, ancestor: bool) -> str | None:
    """Why a file or directory with this stat is unsafe to trust for service user `uid`, or None.
    An `ancestor` directory with the sticky bit (`/tmp`) may be writable by others: they cannot
    replace or rename what they do not own there."""
    if st.st_uid not in (0, uid):
        return f"is owned by {owner_name(st.st_uid)}, not by the service user ({owner_name(uid)}) or root"
    sticky_dir = ancestor and stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX
    mode = stat.S_IMODE(st.st_mode)
    if st.st_mode & stat.S_IWOTH and not sticky_dir:
        return f"is world-writable (mode {mode:04o})"
    if st.st_mode & stat.S_IWGRP and not sticky_dir:
        return f"is group-writable (mode {mode:04o})"
    return None


def check_trusted(path: Path, what: str, *, uid: int | None = None) -> None:
    """Raise ConfigError if `path` exists and another user than the service user or root owns it
    or may write it (a missing path is fine: the bridge creates it private). The message names
    the path, its mode and owner, and the fix."""
    if os.name == "nt":
        return
    uid = service_uid() if uid is None else uid
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    reason = unsafe_reason(st, uid, ancestor=False)
    if reason is None:
        return
    fixes = []
    if st.st_uid not in (0, uid):
        fixes.append(f"chown {user_name(uid) or uid} {path}")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        fixes.append(f"chmod go-w {path}")
    said = [f"mode {stat.S_IMODE(st.st_mode):04o}" if "(mode" not in reason else "",
            f"owner {owner_name(st.st_uid)}" if "owned by" not in reason else ""]
    raise ConfigError(f"{what} {path} {reason}, {', '.join(s for s in said if s)}: another user could change "
                      f"what the bridge trusts, so it refuses to start (fix: {' && '.join(fixes)})")


def private_dir(path: Path) -> Path:
    """`path` as a directory, created 0700 (its missing parents as the umask says) if missing."""
    path = Path(path)
    if not path.is_dir():
        blocker = next((p for p in reversed((path, *path.parents)) if p.exists() and not p.is_dir()), None)
        if blocker is not None:  # say so, rather than mkdir's "File exists"
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(blocker))
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):  # another process made it first: it chose the mode
            path.mkdir(mode=PRIVATE_DIR)
            os.chmod(path, PRIVATE_DIR)  # the umask may have taken bits away; it never adds any
    return path


def private_file(path: Path) -> bool:
    """Create `path` empty, 0600, if missing; True if this call created it."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
    except FileExistsError:
        return False
    try:
        if hasattr(os, "fchmod"):
            os.fchmod(fd, PRIVATE_FILE)
    finally:
        os.close(fd)
    return True
