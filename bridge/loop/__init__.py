"""One listener thread's unit of work, from the receive to the commit: the loop (`listener`, its
`listener_spec`, the units it holds in flight `in_flight`), what a finished unit means and reports
(`unit_plan`, `unit_report`), what preprocessors are told when a unit ends (`undo`), the per-queue
delivery records (`bookkeeping`), the landing ledger as the loop sees it (`dedupe`) and the
preprocessor chain (`preprocess`). It imports nothing of `mqbridge.supervision`."""
