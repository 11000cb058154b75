"""The shared bulk collector and what it decides: one active bulk per message type, flushed by size,
age, memory or count (`collector`, split by the thread that runs it into `intake`, `workers` and
`delivery`; its limits `collector_limits`, adaptive sizes `sizing`), a failed
bulk split to find the message at fault (`triage`), results routed back to the units they belong to
(`result_routes`), and the per-sink circuit breaker that tells an outage from poison (`breaker`)."""
