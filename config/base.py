"""Building blocks of the configuration models: the strict base model, duration and size units,
and the table directory rule. Validators report problems with key paths as
`mqbridge.errors.KeyedError`.

Durations are seconds (float), sizes are bytes (int, binary multiples: 1 KB = 1024 bytes).
"""

from __future__ import annotations

import math
import re
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict

_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|d)?", re.IGNORECASE)
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_SIZE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(b|kb|mb|gb|tb|kib|mib|gib|tib)?", re.IGNORECASE)
#: Binary multiples: 1 KB = 1024 bytes (KiB, MiB... are accepted as the same thing).
_SIZE_UNITS = {"b": 1, "kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30, "tb": 1 << 40}
_TABLE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*)*")


def parse_duration(value: str | int | float) -> float:
    """Seconds in a duration: "500ms", "5s", "2m", "1h", "7d" (a day is 86400 s; units
    case-insensitive) or a plain number of seconds. Raises ValueError for negative, unknown units
    or anything else."""
    hint = "use e.g. 500ms, 5s, 2m, 1h, 7d"
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"a duration is a string like 5s or a number of seconds ({hint})")
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("-"):
            raise ValueError(f"{value!r} is negative ({hint})")
        match = _DURATION.fullmatch(text)
        if not match:
            raise ValueError(f"{value!r} is not a duration ({hint})")
        return float(match[1]) * _DURATION_UNITS[(match[2] or "s").lower()]
    if not math.isfinite(value):
        raise ValueError(f"{value!r} is not a duration ({hint})")
    if value < 0:
        raise ValueError(f"{value!r} is negative ({hint})")
    return float(value)


def parse_size(value: str | int) -> int:
    """Bytes in a size: "100B", "512KB", "5MB", "1GB", "1TB" (KB = 1024 bytes; units
    case-insensitive; KiB... also accepted; fractions rounded down to whole bytes) or a plain
    integer of bytes. Raises ValueError for negative, unknown units or anything else."""
    hint = "use e.g. 512KB, 5MB, 1GB"
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"a size is a string like 5MB or a whole number of bytes ({hint})")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{value} is negative ({hint})")
        return value
    text = value.strip()
    if text.startswith("-"):
        raise ValueError(f"{value!r} is negative ({hint})")
    match = _SIZE.fullmatch(text)
    if not match:
        raise ValueError(f"{value!r} is not a size ({hint})")
    return int(float(match[1]) * _SIZE_UNITS[(match[2] or "b").lower().replace("ib", "b")])


Duration = Annotated[float, BeforeValidator(parse_duration)]
Size = Annotated[int, BeforeValidator(parse_size)]


#: The folder of the embedded Iceberg catalog under the warehouse (`mqbridge.config.iceberg`): no table's.
ICEBERG_CATALOG_DIR = "_iceberg"


def check_table(value: str, written: str | None = None) -> None:
    """Raise ValueError unless `value` is a safe relative directory for a table. `written` is the
    template `value` was rendered from: the message shows what the user wrote, not our rendering."""
    if not _TABLE.fullmatch(value):
        raise ValueError(f"{written or value!r} is not a safe table directory (letters, digits, _ . - and / between "
                         "parts; no '..', no absolute path)")
    if value.split("/", 1)[0] == ICEBERG_CATALOG_DIR:
        raise ValueError(f"{written or value!r}: {ICEBERG_CATALOG_DIR}/ under the warehouse is the embedded Iceberg "
                         "catalog's folder; name the table otherwise")


class Model(BaseModel):
    """Base of every configuration model: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")
