"""The files of a container by message type (`mqbridge.maintenance.engine.type_groups`), the rule of every
rewrite: one group per type, a file of several types apart, files without rows or without a
`message_type` column in a group of their own."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from mqbridge.maintenance.engine.type_groups import type_groups


def parquet(path: Path, columns: dict[str, list[object]]) -> Path:
    pq.write_table(pa.table(columns), path)
    return path


def test_files_are_grouped_by_the_type_of_their_rows_and_a_file_of_several_types_is_apart(tmp_path: Path) -> None:
    # Given a container's files: two of type alpha, one of beta, one holding both, one empty, one raw
    # file without a message_type column
    alpha = [parquet(tmp_path / f"part-a{n}.parquet", {"message_type": ["alpha"] * 2, "qty": [1, 2]}) for n in (1, 2)]
    beta = parquet(tmp_path / "part-b.parquet", {"message_type": ["beta"], "total": [0.5]})
    both = parquet(tmp_path / "part-ab.parquet", {"message_type": ["alpha", "beta"], "qty": [3, None]})
    empty = tmp_path / "part-empty.parquet"
    pq.write_table(pa.table({"message_type": pa.array([], pa.string())}), empty)
    untyped = parquet(tmp_path / "part-raw.parquet", {"body": [b"x"]})

    # When they are grouped
    groups = type_groups([*alpha, beta, both, empty, untyped])

    # Then each type's files are one group (by type name), and the file of both types is apart
    assert groups.by_type == {"alpha": alpha, "beta": [beta], "": [empty, untyped]}
    assert groups.typed == [[empty, untyped], alpha, [beta]]
    assert groups.mixed == [both]
