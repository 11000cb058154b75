"""The systemd unit of a bridge: rendered from its loaded configuration, installed and removed.

The unit runs `mqbridge run --config <file>` as `Type=notify` (READY/STATUS/WATCHDOG/STOPPING come
from `service.notify`), reloads with SIGHUP, and stops with SIGTERM to the bridge only
(`KillMode=mixed`): the Spark JVM is a child process and must outlive the graceful drain, which
still needs it; whatever is left when `TimeoutStopSec` runs out is killed.

Paths are written for systemd's parser: specifiers (`%`) doubled, `$` doubled on command lines,
and anything unusual quoted with C escapes (see `quote`).
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import mqbridge
from mqbridge.config import DEFAULT_PLUGIN_DIRS, BridgeConfig
from mqbridge.strict_modes import private_dir

DEFAULT_UNIT_DIR = Path("/etc/systemd/system")
DEFAULT_USER = "mqbridge"
#: Added to `shutdown_timeout` for `TimeoutStopSec`: Spark's and the JVM's own shutdown.
STOP_MARGIN = 30.0
#: Listener threads may restart with backoff up to 30 s; the watchdog must outlast that.
MIN_WATCHDOG = 60.0
#: The first start pays for the JVM and every listener's first connection before READY=1.
START_TIMEOUT = 300.0
# Where ProtectHome= hides things, and where PrivateTmp= gives the service its own empty dir.
HOME_DIRS = (Path("/home"), Path("/root"), Path("/run/user"))
TMP_DIRS = (Path("/tmp"), Path("/var/tmp"))
_PLAIN = re.compile(r"[A-Za-z0-9_@+=:,./-]+")
_UNIT_NAME_CHARS = re.compile(r"[^A-Za-z0-9:_.-]")


def quote(word: str, *, command: bool = False) -> str:
    """`word` as one word for systemd: `%` doubled (specifiers), on a command line `$` doubled
    (variable expansion), and quoted with C escapes unless it is plain."""
    word = word.replace("%", "%%")
    if command:
        word = word.replace("$", "$$")
    if _PLAIN.fullmatch(word):
        return word
    escaped = (word.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t"))
    return f'"{escaped}"'


def executable(path: str) -> str:
    """The executable of a command line: systemd expands no variables there and refuses quotes,
    backslashes and control characters in it."""
    if any(c in path for c in "\"'\\") or any(ord(c) < 32 or ord(c) == 127 for c in path):
        raise ValueError(f"systemd cannot run an executable whose path contains quotes, backslashes or "
                         f"control characters: {path!r}")
    return quote(path)


def plain_path(path: Path) -> str:
    """A path for settings that take the rest of the line as one path (WorkingDirectory=)."""
    text = str(path)
    if text != text.strip() or any(ord(c) < 32 for c in text):
        raise ValueError(f"systemd cannot use this path: {text!r}")
    return text.replace("%", "%%")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def unit_name(bridge_name: str, subcommand: str = "run") -> str:
    """`mqbridge-<name>.service` (`mqbridge-<name>-follow.service` for `mqbridge follow`), with
    characters systemd does not allow in unit names as "-"."""
    suffix = "" if subcommand == "run" else f"-{subcommand}"
    return f"mqbridge-{_UNIT_NAME_CHARS.sub('-', bridge_name)}{suffix}.service"


def _seconds(value: float) -> str:
    return f"{max(1, round(value))}s"


def _under(path: Path, roots: tuple[Path, ...]) -> bool:
    return any(path == root or root in path.parents for root in roots)


def default_command() -> list[str]:
    """How this installation starts the bridge: the `mqbridge` console script next to the running
    interpreter (a virtualenv's bin/), else `<interpreter> -m mqbridge`. Symlinks are kept: a
    virtualenv's python is a symlink that must stay one."""
    interpreter = Path(os.path.abspath(sys.executable))
    script = interpreter.parent / "mqbridge"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [str(interpreter), "-m", "mqbridge"]


@dataclass
class UnitSpec:
    """Everything the unit says, from the configuration and the installation."""

    name: str
    command: list[str]
    config_file: Path
    user: str
    shutdown_timeout: float
    watchdog: float
    writable: list[Path]
    readable: list[Path] = field(default_factory=list)  # code and configuration the service reads
    private: list[Path] = field(default_factory=list)  # writable directories created 0700 (state_dir)
    working_dir: Path | None = None
    subcommand: str = "run"  # or "follow": the standing reverse path, a service of its own

    @classmethod
    def from_config(cls, config: BridgeConfig, config_file: Path, *, user: str = DEFAULT_USER,
                    command: list[str] | None = None, watchdog: float | None = None,
                    subcommand: str = "run") -> UnitSpec:
        """The unit of a loaded configuration. Writable: the warehouse (a local one), `state_dir` and
        the log file's directory; `watchdog` defaults to four control intervals, at least 60 s."""
        state = config.resolve_path(config.bridge.state_dir)
        warehouse = config.resolve_warehouse()
        writable = [*([warehouse] if isinstance(warehouse, Path) else []), state]
        if config.logging.file is not None:
            writable.append(config.resolve_path(config.logging.file).parent)
        command = command or default_command()
        plugin_dirs = DEFAULT_PLUGIN_DIRS if config.bridge.plugin_dirs is None else config.bridge.plugin_dirs
        monitoring = config.monitoring
        tls_files = (monitoring.tls_cert, monitoring.tls_key, monitoring.tls_client_ca)
        readable = [config_file, Path(command[0]), Path(mqbridge.__file__).resolve().parent.parent,
                    *(config.resolve_path(p) for p in plugin_dirs),
                    *(config.resolve_path(p) for p in tls_files if p is not None)]
        if watchdog is None:
            watchdog = max(MIN_WATCHDOG, 4 * config.bridge.control_interval)
        return cls(name=config.bridge.name, command=command, config_file=config_file, user=user,
                   shutdown_timeout=config.bridge.shutdown_timeout, watchdog=watchdog,
                   writable=_unique([_clean(p) for p in writable]), readable=[_clean(p) for p in readable],
                   private=[_clean(state)], working_dir=_clean(state), subcommand=subcommand)

    @property
    def unit_name(self) -> str:
        return unit_name(self.name, self.subcommand)


def _clean(path: Path) -> Path:
    """Absolute, without `..` (systemd rejects it in paths); symlinks are kept."""
    return Path(os.path.normpath(os.path.abspath(path)))


def _unique(paths: list[Path]) -> list[Path]:
    out: list[Path] = []
    for path in paths:
        if path not in out:
            out.append(path)
    return out


def render_unit(spec: UnitSpec) -> str:
    """The text of the unit file."""
    lines = [
        "# Written by `mqbridge service install --systemd`; `mqbridge service remove --systemd` removes it.",
        "[Unit]",
        f"Description=mqbridge {_one_line(spec.name).replace('%', '%%')}: "
        + ("message queues to Spark tables" if spec.subcommand == "run" else "landed rows forwarded ([[forwards]])"),
        "Wants=network-online.target",
        "After=network-online.target",
        "",
        "[Service]",
        *_process_lines(spec),
        *_sandbox_lines(spec),
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ]
    return "\n".join(lines)


def _process_lines(spec: UnitSpec) -> list[str]:
    """How systemd starts, watches, reloads and stops the bridge, as which user and where."""
    exec_start = " ".join([executable(spec.command[0]), *(quote(w, command=True) for w in
                                                        [*spec.command[1:], spec.subcommand, "--config",
                                                         str(spec.config_file)])])
    if spec.subcommand == "follow":
        # `mqbridge follow` sends no sd_notify and reads the configuration once: a simple service,
        # stopped by SIGTERM after its current batch (its Spark JVM is a child it reads through).
        lines = ["Type=simple", f"ExecStart={exec_start}", "Restart=on-failure", "RestartSec=5s",
                 f"TimeoutStopSec={_seconds(STOP_MARGIN + 30)}", "KillMode=mixed", f"User={spec.user}"]
    else:
        lines = [
            "Type=notify",
            "NotifyAccess=main",
            f"ExecStart={exec_start}",
            "ExecReload=/bin/kill -HUP $MAINPID",
            "Restart=on-failure",
            "RestartSec=5s",
            f"WatchdogSec={_seconds(spec.watchdog) if spec.watchdog > 0 else '0'}",
            f"TimeoutStartSec={_seconds(START_TIMEOUT)}",
            f"TimeoutStopSec={_seconds(spec.shutdown_timeout + STOP_MARGIN)}",
            "# SIGTERM to the bridge only: the Spark JVM (a child) is needed until the drain is done.",
            "KillMode=mixed",
            f"User={spec.user}",
        ]
    if spec.working_dir is not None:
        lines.append(f"WorkingDirectory={plain_path(spec.working_dir)}")
    lines.append("Environment=PYTHONUNBUFFERED=1")
    return lines


def _sandbox_lines(spec: UnitSpec) -> list[str]:
    """What the service may write and see: only its writable paths, and /home and /tmp only where
    a path it needs lies under them."""
    everything = [*spec.readable, *spec.writable]
    home = [p for p in everything if _under(p, HOME_DIRS)]
    tmp = [p for p in everything if _under(p, TMP_DIRS)]
    lines = [
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ReadWritePaths=" + " ".join(quote(str(p)) for p in spec.writable),
    ]
    if home:
        lines.append(f"# read-only, not yes: the service needs {', '.join(sorted({str(p) for p in home}))}")
        lines.append("ProtectHome=read-only")
    else:
        lines.append("ProtectHome=yes")
    if tmp:
        lines.append(f"# no private /tmp: the service needs {', '.join(sorted({str(p) for p in tmp}))}")
        lines.append("PrivateTmp=no")
    else:
        lines.append("PrivateTmp=yes")
    lines += [
        "ProtectKernelTunables=yes",
        "ProtectKernelModules=yes",
        "ProtectControlGroups=yes",
    ]
    return lines


def prepare_directories(spec: UnitSpec) -> list[Path]:
    """Create the writable directories that do not exist yet, owned by the service user (when
    run as root); `ReadWritePaths=` of a missing directory would stop the service from starting.
    The private ones (`state_dir`) are made 0700 whatever the umask, as the bridge makes them
    (`mqbridge.strict_modes`): one the umask left group-writable would stop the bridge at start. The
    warehouse and the log directory follow the umask: readers of the tables and logs may need them.
    Their missing parents follow the umask too. Returns the directories created."""
    created = []
    owner = None
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        import pwd

        entry = pwd.getpwnam(spec.user)
        owner = (entry.pw_uid, entry.pw_gid)
    for path in spec.writable:
        if path.exists():
            continue
        missing = [p for p in (path, *path.parents) if not p.exists()]
        if path in spec.private:
            private_dir(path)
        else:
            path.mkdir(parents=True)
        for made in reversed(missing):
            created.append(made)
            if owner is not None:
                os.chown(made, *owner)
    return created
