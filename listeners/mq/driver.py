"""Loading the IBM MQ driver (ibmmq, else pymqi) and turning its errors into mqbridge's.

Every pymqi/ibmmq exception is wrapped here, once, into `mqbridge.errors` types; nothing above
the MQ adapter sees a driver exception. The reason codes are IBM MQ's (cmqc.h).
"""

from __future__ import annotations

import importlib
import logging
from types import ModuleType
from typing import Any

from mqbridge.errors import ConfigError, SourceConnectionError, SourceError, SourceQuiescingError

log = logging.getLogger(__name__)

#: Driver modules tried in order: IBM's maintained package first, then its predecessor.
DRIVER_MODULES = ("ibmmq", "pymqi")

# The queue manager or the connection to it is gone or going: reconnect (with backoff).
# The unit of work is backed out by the queue manager (except a commit in doubt).
CONNECTION_REASONS = frozenset({
    2003,  # MQRC_BACKED_OUT: the unit of work was backed out (e.g. by an automatic reconnect)
    2009,  # MQRC_CONNECTION_BROKEN
    2018,  # MQRC_HCONN_ERROR: the handle is no longer valid
    2025,  # MQRC_MAX_CONNS_LIMIT_REACHED
    2059,  # MQRC_Q_MGR_NOT_AVAILABLE
    2071,  # MQRC_STORAGE_NOT_AVAILABLE
    2102,  # MQRC_RESOURCE_PROBLEM
    2162,  # MQRC_Q_MGR_STOPPING
    2195,  # MQRC_UNEXPECTED_ERROR
    2203,  # MQRC_CONNECTION_STOPPING
    2223,  # MQRC_Q_MGR_NOT_ACTIVE
    2273,  # MQRC_CONNECTION_ERROR
    2279,  # MQRC_CHANNEL_STOPPED_BY_USER
    2521,  # MQRC_CONNECTION_SUSPENDED
    2537,  # MQRC_CHANNEL_NOT_AVAILABLE
    2538,  # MQRC_HOST_NOT_AVAILABLE
    2543,  # MQRC_STANDBY_Q_MGR
    2548,  # MQRC_RECONNECT_FAILED
    2549,  # MQRC_CALL_INTERRUPTED
    2568,  # MQRC_CONNECTION_NOT_AVAILABLE
})

# Only with *_FAIL_IF_QUIESCING: finish or back out the unit of work, start no new one, stop.
QUIESCING_REASONS = frozenset({2161, 2202})  # MQRC_Q_MGR_QUIESCING, MQRC_CONNECTION_QUIESCING

# Reconnecting cannot help: the configuration (or the queue manager's definitions) must change.
CONFIG_REASONS = frozenset({
    2035,  # MQRC_NOT_AUTHORIZED: user/password, CHLAUTH or object authority
    2058,  # MQRC_Q_MGR_NAME_ERROR
    2063,  # MQRC_SECURITY_ERROR
    2082,  # MQRC_UNKNOWN_ALIAS_BASE_Q
    2085,  # MQRC_UNKNOWN_OBJECT_NAME: the queue does not exist
    2381,  # MQRC_KEY_REPOSITORY_ERROR
    2393,  # MQRC_SSL_INITIALIZATION_ERROR
    2398,  # MQRC_SSL_PEER_NAME_MISMATCH
    2519,  # MQRC_SELECTION_STRING_ERROR: the listener's selector is not a valid selection string
    2425,  # MQRC_TOPIC_STRING_ERROR: a topic listener's topic is not a valid topic string
    2436,  # MQRC_DURABILITY_NOT_ALLOWED: the topic's DURSUB(NO) refuses durable subscriptions
    2440,  # MQRC_SUB_NAME_ERROR: a topic listener's subscription is not a valid subscription name
    2539,  # MQRC_CHANNEL_CONFIG_ERROR
    2540,  # MQRC_UNKNOWN_CHANNEL_NAME
    2594,  # MQRC_PASSWORD_PROTECTION_ERROR
})

MQRC_NO_MSG_AVAILABLE = 2033
MQRC_SYNCPOINT_LIMIT_REACHED = 2024
MQRC_TRUNCATED_MSG_FAILED = 2080
MQRC_BACKED_OUT = 2003
MQRC_PROPERTY_NOT_AVAILABLE = 2471
MQRC_PROPERTY_VALUE_TOO_BIG = 2469
MQCC_WARNING = 1


def load_driver(names: tuple[str, ...] = DRIVER_MODULES) -> ModuleType:
    """The first importable MQ driver module, or a ConfigError saying what to install."""
    problems = []
    for name in names:
        try:
            return importlib.import_module(name)
        except (ImportError, OSError) as exc:  # not installed, or IBM's client library is missing
            problems.append(f"{name}: {exc}")
    raise ConfigError(
        "an IBM MQ source is configured but no IBM MQ driver can be imported "
        f"({'; '.join(problems)}). Install one with `pip install \"mqbridge[ibmmq]\"` "
        "(or `pip install \"mqbridge[pymqi]\"`); both need IBM's MQ client library "
        "(the IBM MQ redistributable client or MQ client installation, with its lib64 directory "
        "on the library path).")


def driver_errors(driver: Any) -> tuple[type[BaseException], ...]:
    """The exception classes a driver raises for MQI and interface errors."""
    base = getattr(driver, "Error", None)
    if isinstance(base, type) and issubclass(base, BaseException):
        return (base,)
    return tuple(c for c in (getattr(driver, "MQMIError", None), getattr(driver, "PYIFError", None))
                 if isinstance(c, type))


def reason_of(exc: BaseException) -> int | None:
    reason = getattr(exc, "reason", None)
    return reason if isinstance(reason, int) else None


def is_warning(exc: BaseException) -> bool:
    return getattr(exc, "comp", None) == MQCC_WARNING


def is_connection_loss(exc: BaseException) -> bool:
    reason = reason_of(exc)
    # A PYIFError ("not connected") carries no reason: the handle is gone.
    return reason is None or reason in CONNECTION_REASONS


def wrap(exc: BaseException, what: str, *, at_connect: bool = False) -> SourceError | ConfigError:
    """The mqbridge error for a driver exception raised by `what` (e.g. "MQGET on QM1/ORDERS")."""
    reason = reason_of(exc)
    text = f"{what} failed: {exc}"
    if reason in QUIESCING_REASONS:
        return SourceQuiescingError(text)
    if reason is None or reason in CONNECTION_REASONS:
        return SourceConnectionError(text)
    if at_connect and reason in CONFIG_REASONS:
        return ConfigError(f"{text} (check the source's queue_manager, channel, conn_name, credentials, "
                           "TLS settings and the queue's definition and authorities)")
    return SourceError(text)


def quietly(call: Any) -> None:
    """Call `call` (if any), ignoring what it raises: closing a handle, a queue, a connection."""
    if call is None:
        return
    try:
        call()
    except Exception as exc:
        log.debug("ignored: %s", exc)
