"""mqbridge: move messages from IBM MQ and STOMP brokers into Spark tables.

This module is the public API for plugin authors::

    from mqbridge import hookimpl, Message, PreprocessorOptions, PreprocessorRegistry, Rollback
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from mqbridge.message import Message, MessageResult, Rollback, RollbackKind
from mqbridge.outbound.outbox import Derived, OutboxRefused, emit, rederiving
from mqbridge.plugins import (
    PreprocessorOptions,
    PreprocessorRegistry,
    copy_message,
    current_chain,
    hookimpl,
)

try:
    __version__ = version("mqbridge")
except PackageNotFoundError:  # running from a checkout that was never installed
    __version__ = "0.0.0"

__all__ = ["Derived", "Message", "MessageResult", "OutboxRefused", "PreprocessorOptions", "PreprocessorRegistry",
           "Rollback", "RollbackKind", "__version__", "copy_message", "current_chain", "emit", "hookimpl", "rederiving"]
