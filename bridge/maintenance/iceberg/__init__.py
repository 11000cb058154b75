"""Purge and compaction of Apache Iceberg tables (`table_format = "iceberg"`): the policies decide what
(the purge's designation and learned cost model, the compaction's planner), Iceberg's own commits carry
it out through the `[spark.iceberg]` catalog, each one snapshot, so a reader (Spark, pyiceberg, Trino)
sees the table before or after, never half, and needs no REFRESH TABLE.

The modules: `table` (a table's Spark name, current snapshot, snapshot expiry and orphan-file removal
after `[purge] vacuum_retention`), `purger` (`IcebergPurger`: per put_date partition a row-level DELETE
written as position deletes, or a copy of the partition's survivors replacing it) and `compaction`
(`IcebergCompaction`: the facts of each partition for the planner, and `rewrite_data_files` sorted by
put_timestamp). The Parquet engine (`mqbridge.maintenance.engine`) is not used: no work directory, swap
or recovery is needed.

Nothing is imported here: the Iceberg table format (`mqbridge.table_formats.iceberg`) hands out `purger`
and `compaction` to the purge and the rounds, which ask the table's format, not this package.
"""
