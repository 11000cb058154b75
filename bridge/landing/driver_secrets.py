"""Secrets kept off the driver JVM's command line and out of its environment.

Any local user can read a process's command line (`ps`, /proc/<pid>/cmdline), and a child inherits
its parent's environment. So `[spark.conf]` values that are secrets (a key like Spark's own
`spark.redaction.regex`, or a value read from `${ENV:}`/`${FILE:}`: `BridgeConfig.secret_conf_keys`)
reach spark-submit in a properties file (`private_properties`: 0600 in a 0700 directory of its
own, removed as soon as the JVM has read it), while the other settings stay `--conf` arguments; and
the JVM gets the bridge's environment without any variable holding one of the bridge's secrets
(`child_environment`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mqbridge.config.schema import SECRET_CONF_KEY

if TYPE_CHECKING:
    from mqbridge.config import BridgeConfig

#: Variables that are credentials by name whatever the configuration says: libpq's password
#: (the PostgreSQL ledger may rely on it; the JVM never needs it).
SECRET_VARIABLES = frozenset({"PGPASSWORD"})
#: A secret this long or longer is also looked for inside variables (a URL holding a password);
#: a shorter one only as a whole value, or every variable holding a common letter would go.
_CONTAINED = 8


@dataclass(frozen=True)
class DriverSecrets:
    """What a driver JVM must not get on its command line (`conf_keys`, besides keys named like
    credentials) or in its environment (`values`)."""

    conf_keys: frozenset[str] = frozenset()
    values: frozenset[str] = frozenset()

    @classmethod
    def of(cls, config: BridgeConfig) -> DriverSecrets:
        """The secrets of a whole configuration: passwords, the ledger URL, the monitoring token,
        secret `[spark.conf]` values."""
        return cls(config.secret_conf_keys(), frozenset(v for v in config.secrets().values() if v))

    def split(self, conf: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
        """(settings that may go on a command line, settings that are secrets)."""
        secret = {k: v for k, v in conf.items() if k in self.conf_keys or SECRET_CONF_KEY.search(k)}
        return {k: v for k, v in conf.items() if k not in secret}, secret


def child_environment(environ: Mapping[str, str], secrets: Collection[str]) -> dict[str, str]:
    """`environ` without the variables that hold one of `secrets` (as their whole value, or inside
    it for a secret of 8 characters or more) or are `SECRET_VARIABLES`."""
    long = [s for s in secrets if len(s) >= _CONTAINED]
    return {name: value for name, value in environ.items()
            if name not in SECRET_VARIABLES and value not in secrets and not any(s in value for s in long)}


def _escape(text: str, key: bool) -> str:
    """`text` for a java.util.Properties file (read as UTF-8 by spark-submit)."""
    out = []
    for n, char in enumerate(text):
        if char in "\\=:#!" or (char == " " and (key or n == 0)):
            out.append("\\" + char)
        else:
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f"}.get(char, char))
    return "".join(out)


def properties_text(settings: Mapping[str, str]) -> str:
    """`settings` as the lines of a Java properties file."""
    return "".join(f"{_escape(k, True)}={_escape(v, False)}\n" for k, v in settings.items())


@contextlib.contextmanager
def private_properties(settings: Mapping[str, str]) -> Iterator[Path]:
    """A properties file holding `settings`, readable by this user only (0600 in a 0700 directory
    made for it), removed with its directory on leaving the block."""
    folder = Path(tempfile.mkdtemp(prefix="mqbridge-spark-"))  # 0700, whatever the umask
    try:
        path = folder / "secret.properties"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(properties_text(settings))
        yield path
    finally:
        shutil.rmtree(folder, ignore_errors=True)
