"""Schema evolution of a typed table: may a type's new `schema` land beside the files written with
the old one? A pure function (`compare`) of two Spark schemas, returning a `Verdict` with reasons.

The rules are what Spark 4.1's Parquet reader accepts when it reads old files with the new schema
(by name through the catalog, or `spark.read.schema(...)`), measured on pyspark 4.2 with both the
vectorized and the row-based reader (docs/spark-and-tables.md "Changing a type's schema"):

- a new column is allowed when it is nullable: old rows read NULL in it (a NOT NULL one is refused:
  the old rows have no value for it); the same holds for a new field inside a STRUCT;
- a widened type is allowed where both readers convert the old physical values: TINYINT -> SMALLINT
  -> INT -> BIGINT, TINYINT/SMALLINT/INT -> DOUBLE, FLOAT -> DOUBLE, DATE -> TIMESTAMP_NTZ,
  DECIMAL(p,s) -> DECIMAL(p+k, s+j) with k >= j >= 0 (no fewer integer digits), and an integer type
  to a DECIMAL with at least its digits before the point (3, 5, 10, 20); inside STRUCT, ARRAY and MAP
  values too. CHAR(n)/VARCHAR(n) are STRING in the files;
- everything else is refused: a dropped column (old files still hold it; a reader of the new schema
  would silently lose it), a narrowed or changed type (INT -> STRING, BIGINT -> DOUBLE,
  DATE -> TIMESTAMP, a decimal's scale raised without its precision: the readers fail or differ),
  and a nullable column made NOT NULL (old rows may hold NULL there).

Names are compared case-insensitively, as Spark resolves them by default.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.types import (
    ArrayType,
    ByteType,
    CharType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    VarcharType,
)

#: Integer types by width, and the decimal digits each needs before the point.
_INTEGERS: dict[type[DataType], int] = {ByteType: 3, ShortType: 5, IntegerType: 10, LongType: 20}
_INTEGER_ORDER = (ByteType, ShortType, IntegerType, LongType)


@dataclass(frozen=True)
class Change:
    """One difference between the old and the new schema: the column (dotted for a nested field),
    its old and new type (Spark's `simpleString`, "" when absent), and why it is refused (`problem`
    empty: allowed)."""

    column: str
    old: str
    new: str
    problem: str = ""

    def line(self) -> str:
        """`column: old -> new: problem` (or without the problem when allowed)."""
        old = self.old or "(none)"
        new = self.new or "(dropped)"
        return f"column {self.column!r}: {old} -> {new}{f': {self.problem}' if self.problem else ''}"


@dataclass(frozen=True)
class Verdict:
    """What `compare` found: the allowed changes (`added`, `widened`) and the refused ones."""

    added: tuple[Change, ...] = ()
    widened: tuple[Change, ...] = ()
    refused: tuple[Change, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether the new schema may land beside the old files."""
        return not self.refused

    @property
    def changed(self) -> bool:
        """Whether anything differs at all."""
        return bool(self.added or self.widened or self.refused)


def compare(old: StructType, new: StructType) -> Verdict:
    """The verdict on landing `new` (a type's schema now) beside files written with `old`."""
    added: list[Change] = []
    widened: list[Change] = []
    refused: list[Change] = []
    _fields(old, new, "", added, widened, refused)
    return Verdict(tuple(added), tuple(widened), tuple(refused))


def _fields(old: StructType, new: StructType, prefix: str, added: list[Change], widened: list[Change],
            refused: list[Change]) -> None:
    """Compare the fields of two structs (top-level columns when `prefix` is "")."""
    new_by_name = {f.name.lower(): f for f in new.fields}
    old_names = {f.name.lower() for f in old.fields}
    for before in old.fields:
        name = prefix + before.name
        after = new_by_name.get(before.name.lower())
        if after is None:
            refused.append(Change(name, _shown(before), "", "dropped: the files written before still hold it"))
            continue
        if before.nullable and not after.nullable:
            refused.append(Change(name, _shown(before), _shown(after),
                                  "made NOT NULL: rows written before may hold NULL in it"))
        _types(before.dataType, after.dataType, name, added, widened, refused)
    for after in new.fields:
        if after.name.lower() in old_names:
            continue
        change = Change(prefix + after.name, "", _shown(after))
        if after.nullable:
            added.append(change)
        else:
            refused.append(Change(change.column, "", change.new,
                                  "added as NOT NULL: the rows written before have no value in it"))


def _types(old: DataType, new: DataType, name: str, added: list[Change], widened: list[Change],
           refused: list[Change]) -> None:
    """Compare the types of one column (or nested field), recursing into STRUCT, ARRAY and MAP."""
    old, new = _physical(old), _physical(new)
    if isinstance(old, StructType) and isinstance(new, StructType):
        _fields(old, new, name + ".", added, widened, refused)
    elif isinstance(old, ArrayType) and isinstance(new, ArrayType):
        if old.containsNull and not new.containsNull:
            refused.append(Change(name, old.simpleString(), new.simpleString(),
                                  "elements made NOT NULL: arrays written before may hold NULL"))
        _types(old.elementType, new.elementType, name + "[]", added, widened, refused)
    elif isinstance(old, MapType) and isinstance(new, MapType):
        if _physical(old.keyType) != _physical(new.keyType):
            refused.append(Change(name, old.simpleString(), new.simpleString(), "a map's key type cannot change"))
        if old.valueContainsNull and not new.valueContainsNull:
            refused.append(Change(name, old.simpleString(), new.simpleString(),
                                  "values made NOT NULL: maps written before may hold NULL"))
        _types(old.valueType, new.valueType, name + "{}", added, widened, refused)
    elif old != new:
        if widens(old, new):
            widened.append(Change(name, old.simpleString(), new.simpleString()))
        else:
            refused.append(Change(name, old.simpleString(), new.simpleString(), _why_not(old, new)))


def widens(old: DataType, new: DataType) -> bool:
    """Whether Spark 4.1 reads Parquet values of primitive type `old` as `new` without loss."""
    old, new = _physical(old), _physical(new)
    if type(old) in _INTEGERS:
        if type(new) in _INTEGERS:
            return _INTEGER_ORDER.index(type(new)) > _INTEGER_ORDER.index(type(old))
        if isinstance(new, DoubleType):
            return not isinstance(old, LongType)  # a BIGINT does not fit a double exactly
        if isinstance(new, DecimalType):
            return new.precision - new.scale >= _INTEGERS[type(old)]
        return False
    if isinstance(old, FloatType):
        return isinstance(new, DoubleType)
    if isinstance(old, DateType):
        return isinstance(new, TimestampNTZType)
    if isinstance(old, DecimalType) and isinstance(new, DecimalType):
        return new.scale >= old.scale and new.precision - new.scale >= old.precision - old.scale
    return False


def _why_not(old: DataType, new: DataType) -> str:
    """The refusal of a primitive type change, with the kind of change named."""
    if widens(new, old):
        return "narrowed: values written before may not fit"
    if isinstance(old, DecimalType) and isinstance(new, DecimalType):
        return ("a DECIMAL may only gain digits: the scale may rise only as much as the precision, and "
                "neither may fall")
    return "changed type: Spark cannot read the files written before as the new type"


def _physical(data_type: DataType) -> DataType:
    """The type as Parquet files hold it: CHAR(n) and VARCHAR(n) are STRING."""
    return StringType() if isinstance(data_type, CharType | VarcharType) else data_type


def _shown(f: StructField) -> str:
    return f.dataType.simpleString() + ("" if f.nullable else " NOT NULL")
