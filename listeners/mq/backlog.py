"""The backlog of IBM MQ queues (`mqbridge.backlog`): MQINQ of CURDEPTH on a connection of the
probe's own (never a listener's), each queue opened for inquire only. CURDEPTH counts committed
messages and those in open units of work (like `DISPLAY QLOCAL(...) CURDEPTH`); MQINQ does not
give the oldest message's age (that is `DISPLAY QSTATUS ... MSGAGE`, over PCF)."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Any

from mqbridge.backlog import BacklogProbe, Reading
from mqbridge.config import MqSourceConfig, SourceConfig
from mqbridge.errors import ConfigError
from mqbridge.listeners.mq.connect import connect_qmgr
from mqbridge.listeners.mq.driver import driver_errors, load_driver, wrap

log = logging.getLogger(__name__)


def probe_for(name: str, config: SourceConfig, driver: Any = None) -> BacklogProbe | None:
    """The CURDEPTH probe of an IBM MQ source (`driver`: the MQ module, loaded when None); None
    without a driver (the source itself then says what to install)."""
    assert isinstance(config, MqSourceConfig)
    if driver is None:
        try:
            driver = load_driver()
        except ConfigError:
            return None
    return QueueDepths(name, config, driver)


class QueueDepths:
    """Inquires CURDEPTH of queues, keeping one connection and the opened queues between reads."""

    def __init__(self, name: str, config: MqSourceConfig, driver: Any) -> None:
        self.name, self.config = name, config
        self._driver = driver
        self._qmgr: Any = None
        self._queues: dict[str, Any] = {}

    def read(self, queues: Sequence[str], timeout: float) -> dict[str, Reading]:
        # MQI calls have no timeout of their own: the client channel's own limits bound a connect,
        # and an inquiry of a connected queue manager answers at once.
        driver = self._driver
        errors = driver_errors(driver)
        found: dict[str, Reading] = {}
        try:
            if self._qmgr is None:
                self._qmgr = connect_qmgr(driver, errors, self.config, driver.CMQC.MQCNO_NONE)
            for name in queues:
                queue = self._queues.get(name)
                if queue is None:
                    queue = driver.Queue(self._qmgr, name.encode(), driver.CMQC.MQOO_INQUIRE
                                         | driver.CMQC.MQOO_FAIL_IF_QUIESCING)
                    self._queues[name] = queue
                found[name] = Reading(int(queue.inquire(driver.CMQC.MQIA_CURRENT_Q_DEPTH)), None, time.monotonic())
        except errors as exc:
            self.close()  # reconnect next time
            raise wrap(exc, f"MQINQ CURDEPTH on {self.config.queue_manager}") from exc
        return found

    def close(self) -> None:
        queues, self._queues = self._queues, {}
        qmgr, self._qmgr = self._qmgr, None
        errors = driver_errors(self._driver)
        for queue in queues.values():
            with contextlib.suppress(*errors):  # the connection is going anyway
                queue.close()
        if qmgr is not None:
            try:
                qmgr.disconnect()  # no unit of work is ever open on this connection
            except errors:
                log.debug("disconnecting the backlog probe of %s failed", self.name, exc_info=True)
