"""Finding plugin code and running it safely: the built-ins (declared once, in `BUILTIN_PLUGINS`),
installed packages (entry-point group `mqbridge`) and loose `.py` files in the plugin folders.

Drop-in files are checked like sshd's StrictModes (`mqbridge.strict_modes`, which checks the
`state_dir` and the ledger too) before a byte of them runs: the file, its folder and every
directory up to `/` must be owned by the service user or root and not be writable by group or
others. The one exception is an *ancestor* directory with the sticky bit (`/tmp`): others may write
there but cannot replace or rename what they do not own.

Each drop-in file is executed from the exact bytes that were checked and fingerprinted, as a
module with a unique name (`mqbridge_dropin_<stem>_<n>`), so a reloaded version never collides
with, or is shadowed by, the one it replaces; `forget_modules` deletes retired names from
`sys.modules`. No bytecode is cached next to the file.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import importlib
import importlib.metadata
import importlib.util
import itertools
import os
import re
import stat
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any

from mqbridge import strict_modes
from mqbridge.errors import PluginError, PluginLoadError, UnsafePluginPathError
from mqbridge.strict_modes import unsafe_reason

#: The built-in plugins, by module name: the one place they are declared. They are found by name
#: (core never imports `mqbridge.preprocessors`) and registered exactly like a third-party plugin.
BUILTIN_PLUGINS = ("mqbridge.preprocessors.envelope", "mqbridge.preprocessors.decode",
                   "mqbridge.preprocessors.jsonpath")
ENTRY_POINT_GROUP = "mqbridge"
DROPIN_PREFIX = "mqbridge_dropin_"
DISABLED_ENV = "MQBRIDGE_DISABLED_PLUGINS"

_module_seq = itertools.count(1)
_module_seq_lock = threading.Lock()


class Source(str, enum.Enum):
    """Where a plugin comes from."""

    BUILTIN = "built-in"
    FOLDER = "folder"
    PACKAGE = "package"


@dataclass(frozen=True)
class LoadProblem:
    """Why one plugin (or folder) could not be loaded, with the file and line when known."""

    plugin: str
    message: str
    path: str | None = None
    line: int | None = None
    unsafe: bool = False  # an unsafe file or folder (UnsafePluginPathError): refuses start

    @property
    def where(self) -> str:
        if self.path is None:
            return f"plugin {self.plugin}"
        return f"{self.path}:{self.line}" if self.line else self.path

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"

    def as_dict(self) -> dict[str, Any]:
        return {"plugin": self.plugin, "path": self.path, "line": self.line, "error": self.message}


@dataclass(frozen=True)
class Candidate:
    """A plugin found among the built-ins, the installed packages or in a folder, not yet run."""

    key: str  # unique pluggy name: "built-in:mqbridge.preprocessors.envelope", "folder:/abs/x.py"...
    name: str  # the name MQBRIDGE_DISABLED_PLUGINS and the listing use
    source: Source
    path: Path | None = None
    version: str | None = None
    mtime: float | None = None
    data: bytes | None = field(default=None, repr=False)  # folder plugins: the checked contents
    fingerprint: tuple[str, int, int] | None = None  # folder plugins: (sha256, mode, uid)
    importer: Callable[[], object] | None = None  # built-ins and packages

    def load(self) -> Plugin:
        """Run the plugin's code. Raises PluginError (PluginLoadError with the file and line)."""
        if self.data is None:
            assert self.importer is not None
            try:
                obj = self.importer()
            except Exception as exc:
                raise PluginError(f"cannot import: {type(exc).__name__}: {exc}") from exc
            file = getattr(obj, "__file__", None)
            return Plugin(self, obj, Path(file) if file else None,
                          self.version or getattr(obj, "__version__", None))
        assert self.path is not None
        module = _exec_file(self.path, self.data)
        return Plugin(self, module, self.path, getattr(module, "__version__", None), module.__name__)


@dataclass
class Plugin:
    """A plugin whose code ran: the module (or object) pluggy registers."""

    candidate: Candidate
    obj: object
    path: Path | None
    version: str | None
    module_name: str | None = None  # folder plugins: their unique sys.modules name
    preprocessors: list[str] = field(default_factory=list)  # what it registered

    @property
    def key(self) -> str:
        return self.candidate.key

    @property
    def name(self) -> str:
        return self.candidate.name


def disabled_from_env(environ: Mapping[str, str] | None = None) -> frozenset[str]:
    """Plugin names listed (comma-separated) in MQBRIDGE_DISABLED_PLUGINS."""
    value = (os.environ if environ is None else environ).get(DISABLED_ENV, "")
    return frozenset(part.strip() for part in value.split(",") if part.strip())


# -- safety --------------------------------------------------------------------------------------
def check_safe_path(path: Path, service_uid: int, *, target_stat: os.stat_result | None = None) -> None:
    """Raise UnsafePluginPathError unless `path` and every directory above it (after resolving
    symbolic links) is owned by `service_uid` or root and not group- or world-writable."""
    if os.name == "nt":  # ownership and mode bits mean nothing there; folder ACLs apply
        return
    real = Path(os.path.realpath(path))
    for index, component in enumerate([real, *real.parents]):
        st = target_stat if index == 0 and target_stat is not None else os.stat(component)
        reason = unsafe_reason(st, service_uid, ancestor=index > 0)
        if reason is not None:
            what = "" if component == real else f" (a directory above {path})"
            raise UnsafePluginPathError(f"refusing to load plugins from {path}: {component}{what} {reason}")


def default_service_uid() -> int:
    return strict_modes.service_uid()


# -- discovery -----------------------------------------------------------------------------------
def builtin_candidates(modules: Iterable[str] = BUILTIN_PLUGINS) -> list[Candidate]:
    return [Candidate(f"{Source.BUILTIN.value}:{m}", m.rsplit(".", 1)[-1], Source.BUILTIN,
                      importer=functools.partial(importlib.import_module, m))
            for m in modules]


def package_candidates(entry_points: Iterable[Any],
                       builtin_modules: Iterable[str] = BUILTIN_PLUGINS) -> list[Candidate]:
    """Installed plugins; entry points that name a built-in module are the built-ins themselves."""
    builtins = set(builtin_modules)
    return [Candidate(f"{Source.PACKAGE.value}:{ep.name}", ep.name, Source.PACKAGE,
                      version=getattr(getattr(ep, "dist", None), "version", None), importer=ep.load)
            for ep in entry_points if ep.value.split(":", 1)[0] not in builtins]


def installed_entry_points(group: str = ENTRY_POINT_GROUP) -> list[Any]:
    return list(importlib.metadata.entry_points(group=group))


def _builtin_files(modules: Iterable[str]) -> set[str]:
    """Real paths of the built-in modules, so a plugin folder that is the `preprocessors` package
    does not load them a second time as drop-ins."""
    specs = (importlib.util.find_spec(name) for name in modules)
    return {os.path.realpath(spec.origin) for spec in specs if spec is not None and spec.origin}


def folder_candidates(folders: Iterable[Path], service_uid: int,
                      builtin_modules: Iterable[str] = BUILTIN_PLUGINS, *,
                      missing_ok: bool = False) -> tuple[list[Candidate], list[LoadProblem]]:
    """Every `*.py` file (not starting with `_` or `.`) of each folder, read and checked.
    A folder that does not exist is an error unless `missing_ok` (the default folder)."""
    candidates: list[Candidate] = []
    errors: list[LoadProblem] = []
    skip = _builtin_files(builtin_modules)
    for folder in folders:
        if missing_ok and not folder.exists():
            continue
        try:
            if not folder.is_dir():
                raise PluginError(f"plugin folder {folder} does not exist or is not a directory")
            check_safe_path(folder, service_uid)
            files = sorted(p for p in folder.iterdir()
                           if p.suffix == ".py" and not p.name.startswith(("_", ".")))
        except (PluginError, OSError) as exc:
            errors.append(LoadProblem(f"folder {folder}", str(exc), str(folder),
                                    unsafe=isinstance(exc, UnsafePluginPathError)))
            continue
        for path in files:
            if os.path.realpath(path) in skip:
                continue
            try:
                candidates.append(read_candidate(path, service_uid))
            except (PluginError, OSError) as exc:
                errors.append(LoadProblem(path.stem, str(exc) if isinstance(exc, PluginError)
                                        else f"{type(exc).__name__}: {exc}", str(path),
                                        unsafe=isinstance(exc, UnsafePluginPathError)))
    return candidates, errors


def read_candidate(path: Path, service_uid: int) -> Candidate:
    """Read one drop-in file, checking the opened file itself (not a path that could be swapped
    between the check and the read) and every directory above it."""
    with open(path, "rb") as handle:
        st = os.fstat(handle.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise PluginError(f"{path} is not a regular file")
        check_safe_path(path, service_uid, target_stat=st)
        data = handle.read()
    digest = hashlib.sha256(data).hexdigest()
    return Candidate(f"{Source.FOLDER.value}:{path.absolute()}", path.stem, Source.FOLDER, path=path,
                     mtime=st.st_mtime, data=data, fingerprint=(digest, st.st_mode, st.st_uid))


# -- running drop-in files -------------------------------------------------------------------------
def _exec_file(path: Path, data: bytes) -> ModuleType:
    stem = re.sub(r"\W", "_", path.stem)
    with _module_seq_lock:
        name = f"{DROPIN_PREFIX}{stem}_{next(_module_seq)}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None:
        raise PluginLoadError(f"cannot make a module of {path}", str(path), None)
    module = importlib.util.module_from_spec(spec)
    # In sys.modules while it runs: dataclasses, pydantic and typing look the module up by name.
    sys.modules[name] = module
    try:
        exec(compile(data, str(path), "exec", dont_inherit=True), module.__dict__)
    except (Exception, SystemExit) as exc:
        sys.modules.pop(name, None)
        detail = exc.msg if isinstance(exc, SyntaxError) else str(exc)
        raise PluginLoadError(f"{type(exc).__name__}: {detail}", str(path), error_line(exc, str(path))) from exc
    return module


def error_line(exc: BaseException, filename: str) -> int | None:
    """The line of `filename` where `exc` was raised (the innermost frame in that file)."""
    if isinstance(exc, SyntaxError) and exc.filename == filename:
        return exc.lineno
    line = None
    tb: TracebackType | None = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def forget_modules(names: Iterable[str]) -> None:
    """Delete retired drop-in modules from sys.modules."""
    for name in names:
        if name.startswith(DROPIN_PREFIX):
            sys.modules.pop(name, None)
