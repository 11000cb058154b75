"""`check-config`'s findings on schema changes: each typed type's `schema` against the schemas its
tables were written with (`mqbridge.landing.schema_verdicts`: Parquet footers, a Delta log, read
without Spark). A refused change is an error (`run` refuses it too, before any listener connects); a
compatible one (a nullable column added, a type widened) is not reported."""

from __future__ import annotations

from collections.abc import Iterator

from mqbridge.config import BridgeConfig
from mqbridge.lint.findings import Finding


def evolution_findings(config: BridgeConfig) -> Iterator[Finding]:
    """One error per refused change, on the line of the type's `schema`."""
    from mqbridge.landing.schema_verdicts import FIX, schema_verdicts  # pyarrow, delta-rs, no JVM

    for found in schema_verdicts(config):
        for change in found.verdict.refused:
            problem = found.refusal(change).split(": ", 1)[1]  # the key is the finding's own
            yield Finding(("types", found.message_type, "schema"), problem, FIX)
