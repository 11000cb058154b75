"""What the supervisor (`mqbridge.supervision.supervisor`) does about a listener thread that ended with an
error: decided by the error's class, along its MRO, from the decision base classes of
`mqbridge.errors`."""

from __future__ import annotations

from enum import Enum

from mqbridge.errors import FatalError, HaltListener, RetryLater


class Decision(Enum):
    """What the supervisor does about a listener thread that ended with an error."""

    STOP_BRIDGE = "stop the bridge"  # FatalError: retrying cannot help
    HALT = "halt the listener"  # HaltListener: never restart it (an operator must act)
    RETRY_LATER = "retry later"  # RetryLater: restart after its retry_after, no backoff growth
    RESTART = "restart with backoff"  # anything else


#: The decision for each decision base class of mqbridge.errors; found along the error's MRO.
DECISIONS: dict[type[BaseException], Decision] = {
    FatalError: Decision.STOP_BRIDGE,
    HaltListener: Decision.HALT,
    RetryLater: Decision.RETRY_LATER,
}


def decide(failure: BaseException) -> Decision:
    """The supervisor's decision about a listener thread that raised `failure`."""
    for cls in type(failure).__mro__:
        decision = DECISIONS.get(cls)
        if decision is not None:
            return decision
    return Decision.RESTART
