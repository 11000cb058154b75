"""Failpoints: a test-only way to kill the bridge at a named step of the landing protocol.

    MQBRIDGE_FAILPOINT=after_publish mqbridge run --config bridge.toml

makes the process kill itself (SIGKILL: no cleanup, no flush, like `kill -9` or a power cut) the
first time it reaches that step. `name:exit` exits with status 137 through `os._exit` instead, for
platforms without SIGKILL. Unset (the default), `hit()` costs one dictionary lookup. The
environment is read when a point is reached, never at import time.

Points, in the order of the protocol (see README "Delivery guarantees"):

    after_stage           a bulk's files are written to its staging directory
    after_prepare         the ledger holds the bulk as prepared
    after_publish         the bulk's files are in the table; the ledger does not say published yet
    before_source_commit  the ledger says published; the source has not committed
    after_source_commit   the source committed the unit of work

and of a purge (`mqbridge.purge`), per container:

    purge_before_swap     the new container is built beside the live one
    purge_after_swap      the new container is live; the old one is not removed yet
"""

from __future__ import annotations

import logging
import os
import signal

log = logging.getLogger(__name__)

ENVIRONMENT_VARIABLE = "MQBRIDGE_FAILPOINT"
POINTS = ("after_stage", "after_prepare", "after_publish", "before_source_commit", "after_source_commit",
          "purge_before_swap", "purge_after_swap")


def hit(point: str) -> None:
    """Die here if the environment names this point (see the module docstring)."""
    wanted = os.environ.get(ENVIRONMENT_VARIABLE)
    if not wanted:
        return
    name, _, action = wanted.partition(":")
    if name != point:
        return
    log.critical("failpoint %s reached: killing the process (%s)", point, action or "kill")
    logging.shutdown()
    if action == "exit" or not hasattr(signal, "SIGKILL"):
        os._exit(137)
    os.kill(os.getpid(), signal.SIGKILL)
