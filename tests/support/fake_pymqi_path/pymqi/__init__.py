"""`pymqi` for a `mqbridge run` subprocess in tests: the fake driver over a persistent fake queue
manager, so a real bridge process can be SIGKILLed and started again on the same queue state.

Put ``tests/support/fake_pymqi_path`` (and the repository root, for ``tests.support``) on the
subprocess's PYTHONPATH and the state file's path in ``MQBRIDGE_FAKE_QM_STATE``; mqbridge's
`load_driver()` then imports this module as ``pymqi``. Importing it opens (loads) the queue
manager from the state file, backing out whatever unit of work a dead process left open, and
registers it under its name. Never installed, never on the path of the test process itself.
"""

from __future__ import annotations

from tests.support.fakes.mq_server import FakeQueueManagerServer
from tests.support.fakes.pymqi_fake import (
    CD,
    CMHO,
    CMQC,
    CMQXC,
    CSP,
    GMO,
    IMPO,
    MD,
    OD,
    PD,
    PMO,
    SCO,
    SD,
    SMPO,
    Error,
    MessageHandle,
    MQMIError,
    PYIFError,
    Queue,
    QueueManager,
    Subscription,
    Topic,
)

__all__ = ["CD", "CMHO", "CMQC", "CMQXC", "CSP", "GMO", "IMPO", "MD", "OD", "PD", "PMO", "SCO", "SD", "SERVER", "SMPO",
           "Error", "MQMIError", "MessageHandle", "PYIFError", "Queue", "QueueManager", "Subscription", "Topic"]

__version__ = "0.0.0+fake"

#: The queue manager this process talks to, loaded from $MQBRIDGE_FAKE_QM_STATE.
SERVER = FakeQueueManagerServer.persistent()
