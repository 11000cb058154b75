"""Purge and compaction of Delta Lake tables (`table_format = "delta"`): the policies decide what
(the purge's designation and learned cost model, the compaction's planner), Delta's own commands
carry it out, each one commit of the table's log, so a reader (Spark, delta-rs, Trino) sees the
table before or after, never half, and needs no REFRESH TABLE.

The modules: `table` (the SQL name of a table, its version, its deletion-vector setting, VACUUM),
`strategy` (the pure choice among drop, delete and copy for one partition), `purger` (`DeltaPurger`:
the purge of a table's put_date partitions by DELETE or by a copy that replaces the partition with
its survivors) and `compaction` (`DeltaCompaction`: the facts of each partition for the planner,
and OPTIMIZE ... ZORDER BY (put_timestamp)). The Parquet engine (`mqbridge.maintenance.engine`) is
not used: Delta needs no work directory, swap or recovery of its own.

Nothing is imported here: the Delta table format (`mqbridge.table_formats.delta`) hands out `purger`
and `compaction` to the purge and the rounds, which ask the table's format, not this package.
"""
