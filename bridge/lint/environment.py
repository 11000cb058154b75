"""What `run` would refuse on this machine, found without contacting a broker or starting Spark:
directories it must write, files it must read, and the drivers the configuration names.

Each check says what it found and what to do. Directories that do not exist yet are fine when
this user can create them (the bridge creates `state_dir` and the warehouse on first use).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from mqbridge.config import BridgeConfig, MqSourceConfig, StompSourceConfig
from mqbridge.config.warehouse import ObjectStoreUri
from mqbridge.errors import ConfigError, Loc
from mqbridge.landing.object_stores import s3a_jars
from mqbridge.lint.findings import Finding
from mqbridge.strict_modes import check_trusted
from mqbridge.table_formats import format_named, formats_configured

#: Modules of pyspark's `connect` extra (pyspark.sql.connect.utils.check_dependencies).
_CONNECT_MODULES = ("grpc", "grpc_status", "google.protobuf", "zstandard")
#: IBM MQ drivers, in the order the MQ adapter tries them (mqbridge.listeners.mq.driver).
_MQ_DRIVERS = ("ibmmq", "pymqi")


def environment_findings(config: BridgeConfig) -> list[Finding]:
    """Every directory, file and driver problem of `config` on this machine."""
    return [*_directories(config), *_files(config), *_drivers(config)]


def _directories(config: BridgeConfig) -> Iterator[Finding]:
    state_dir = _resolved(config, config.bridge.state_dir)
    yield from _writable_dir(("bridge", "state_dir"), state_dir)
    if state_dir.is_dir():  # (a missing one is created private; check_trusted would stat through a file)
        try:
            check_trusted(state_dir, "state_dir")
        except ConfigError as exc:
            yield Finding(("bridge", "state_dir"), str(exc))
    warehouse = config.resolve_warehouse()
    # With Spark Connect the warehouse is the server's path, not ours; an object store's is not a directory.
    if config.spark.remote is None and isinstance(warehouse, Path):
        yield from _writable_dir(("spark", "warehouse"), warehouse.resolve())
    if config.logging.file is not None:
        yield from _writable_file(("logging", "file"), _resolved(config, config.logging.file))
    for index, folder in enumerate(config.bridge.plugin_dirs or ()):
        path = _resolved(config, folder)
        if not path.is_dir():
            yield Finding(("bridge", "plugin_dirs", index), f"{path}: {_missing_or_not(path, 'a directory')}",
                          "create it, or remove it from plugin_dirs")
        elif not os.access(path, os.R_OK | os.X_OK):
            yield Finding(("bridge", "plugin_dirs", index), f"{path}: not readable by this user",
                          "chmod u+rx it, or run as the user that owns it")


def _writable_dir(loc: Loc, path: Path) -> Iterator[Finding]:
    if path.exists():
        if not path.is_dir():
            yield Finding(loc, f"{path} is not a directory", "point it at a directory (the bridge creates it)")
        elif not os.access(path, os.W_OK | os.X_OK) or _creation_refused(path):
            yield Finding(loc, f"{path} is not writable by this user", "chmod u+w it, or choose a directory "
                          "this user owns")
        return
    ancestor = next(p for p in path.parents if p.exists())
    if not ancestor.is_dir():
        yield Finding(loc, f"{path} cannot be created: {ancestor} is not a directory", "choose another path")
    elif not os.access(ancestor, os.W_OK | os.X_OK):
        yield Finding(loc, f"{path} cannot be created: {ancestor} is not writable by this user",
                      f"create {path} for this user, or choose a directory under one it owns")
    elif problem := _creation_refused(ancestor):
        yield Finding(loc, f"{path} cannot be created: {ancestor} refuses new directories ({problem})",
                      "choose a directory on a writable file system")


def _creation_refused(directory: Path) -> str | None:
    """Why a directory cannot be made in `directory`, found by making (and removing) one: the
    permission bits do not tell for root, a read-only mount or a pseudo file system such as /proc,
    where `run` would otherwise meet the refusal as a sink outage and wait forever."""
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".mqbridge-check-", dir=directory))
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return None


def _writable_file(loc: Loc, path: Path) -> Iterator[Finding]:
    if path.exists():
        if path.is_dir():
            yield Finding(loc, f"{path} is a directory", "name a file in it, e.g. mqbridge.log")
        elif not os.access(path, os.W_OK):
            yield Finding(loc, f"{path} is not writable by this user", "chmod u+w it")
    else:
        yield from _writable_dir(loc, path.parent)


def _files(config: BridgeConfig) -> Iterator[Finding]:
    for name, source in config.sources.items():
        if isinstance(source, StompSourceConfig):
            for key in ("ca_certs", "cert_file", "key_file"):
                yield from _readable(config, ("sources", name, key), getattr(source, key))
        elif isinstance(source, MqSourceConfig) and source.key_repository:
            # MQ's key repository is a stem: the client opens <stem>.kdb (and its .sth stash).
            stem = _resolved(config, source.key_repository)
            yield from _readable(config, ("sources", name, "key_repository"), stem.with_name(stem.name + ".kdb"))
    monitoring = config.monitoring
    if monitoring.enabled:
        for key in ("tls_cert", "tls_key", "tls_client_ca", "tls_ca", "client_cert", "client_key"):
            yield from _readable(config, ("monitoring", key), getattr(monitoring, key))


def _readable(config: BridgeConfig, loc: Loc, path: Path | None) -> Iterator[Finding]:
    if path is None:
        return
    full = _resolved(config, path)
    if not full.is_file():
        yield Finding(loc, f"{full}: {_missing_or_not(full, 'a file')}",
                      f"write the path of the file (a relative path is taken from {config.base_dir})")
    elif not os.access(full, os.R_OK):
        yield Finding(loc, f"{full}: not readable by this user", "chmod u+r it, or run as the user that owns it")


def _missing_or_not(path: Path, what: str) -> str:
    return f"not {what}" if path.exists() else "no such file or directory"


def _drivers(config: BridgeConfig) -> Iterator[Finding]:
    for name, source in config.sources.items():
        if isinstance(source, MqSourceConfig):
            problem = _mq_driver_problem()
            if problem:
                yield Finding(("sources", name, "kind"), f"an IBM MQ source needs an MQ driver: {problem}",
                              'pip install "mqbridge[ibmmq]" (or "mqbridge[pymqi]"); both need IBM\'s MQ client '
                              "library on the library path")
        elif isinstance(source, StompSourceConfig) and importlib.util.find_spec("stomp") is None:
            yield Finding(("sources", name, "kind"), "a STOMP source needs stomp.py, which is not installed",
                          'pip install "stomp-py>=8.1,<10" (a dependency of mqbridge: reinstall it)')
    if config.spark.remote is not None:
        missing = [m for m in _CONNECT_MODULES if not _installed(m)]
        if missing:
            yield Finding(("spark", "remote"), f"Spark Connect needs {', '.join(missing)}, not installed",
                          'pip install "mqbridge[connect]"')
    yield from _table_formats(config)
    warehouse = config.spark.warehouse
    if config.spark.remote is None and isinstance(warehouse, ObjectStoreUri) and warehouse.scheme == "s3a":
        try:
            s3a_jars(_resolved(config, config.spark.jars_dir))
        except ConfigError as exc:
            yield Finding(("spark", "jars_dir"), str(exc))
    if config.ledger.url is not None and not _installed("psycopg"):
        yield Finding(("ledger", "url"), "a PostgreSQL ledger needs psycopg, which is not installed",
                      'pip install "mqbridge[postgresql]"')


def _table_formats(config: BridgeConfig) -> Iterator[Finding]:
    """What each table format the types land in needs here, as the format says: the jars of the
    bridge's own Spark driver (its `session_conf`: Delta's, and on s3a:// its log store; a Spark Connect
    server brings its own) and
    the package its tables are read back with (`reader_missing`: delta-rs for Delta)."""
    for name in formats_configured(config.types, config.spark.table_format):
        table_format = format_named(name)
        if config.spark.remote is None:
            try:
                table_format.session_conf(_resolved(config, config.spark.jars_dir), config.spark.conf,
                                          config.resolve_warehouse())
            except ConfigError as exc:
                yield Finding(("spark", "jars_dir"), str(exc))
        missing = table_format.reader_missing()
        if missing is not None:
            yield Finding(("spark", "table_format"), missing[0], missing[1], "warning")


def _resolved(config: BridgeConfig, path: Path | str) -> Path:
    """`path` as the bridge would use it, shown without `..` (`config/../data` is `data`); resolving
    follows symlinks as the kernel does, so the checks see the same directory."""
    return config.resolve_path(path).resolve()


def _mq_driver_problem() -> str | None:
    """None when an MQ driver imports; else why none does. Importing (not just finding) the module,
    because a driver installed without IBM's client library fails only at import."""
    problems = []
    for name in _MQ_DRIVERS:
        try:
            importlib.import_module(name)
        except (ImportError, OSError) as exc:
            problems.append(f"{name}: {' '.join(str(exc).split())}")
        else:
            return None
    return "; ".join(problems)


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # the parent package of a dotted name is missing
        return False
