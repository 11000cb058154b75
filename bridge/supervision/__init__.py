"""Keeping the listener threads running: the supervisor that starts, restarts and stops them
(`supervisor`), what it does about a thread that failed (`decision`), the run-time control an operator
uses (`control`: pause, stop, thread counts), a configuration reloaded on SIGHUP (`reload`) and the
memory guard (`guard`)."""
