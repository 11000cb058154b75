"""`[collector]`: the bulk collector's memory and concurrency limits (`mqbridge.bulks.collector`)."""

from __future__ import annotations

from pydantic import Field

from mqbridge.config.base import Model, Size, parse_size


class CollectorSection(Model):
    """`[collector]`: memory and concurrency limits of the bulk collector."""

    memory: Size = Field(default=parse_size("256MB"), gt=0, description="Collector memory; flush and backpressure")
    max_bulks: int = Field(default=10, ge=1, description="Maximum number of active bulks")
    workers: int = Field(default=2, ge=1, description="Threads forwarding bulks to executors")
    writes_per_type: int = Field(default=1, ge=1, description="Bulks of one type written at a time: their Spark "
                                 "jobs overlap, their publication is one after another (2 was slower on 2 cores: "
                                 "docs/performance.md); a Delta bulk counts only while its job writes its files, "
                                 "not while it commits")
