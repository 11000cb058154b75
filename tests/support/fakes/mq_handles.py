"""Message handles of the fake queue manager: MQCRTMH, MQDLTMH, MQSETMP, MQINQMP (message properties,
with MQINQMP's wildcard names and its cursor). Mixed into `FakeQueueManagerServer`, whose attributes
these are."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

from tests.support.fakes import mq_cmqc as CMQC
from tests.support.fakes.mq_model import Connection, fail


class MessageHandles:
    """MQ's message handles and their properties."""

    cond: threading.Condition
    wildcard_names: bool
    _hmsgs: Iterator[int]

    # the server's own (annotations only: a definition here would stand in front of them)
    _check: Callable[[Connection], None]
    _maybe_fault: Callable[[Connection | None, str, str | None], None]

    def mqcrtmh(self, conn: Connection) -> int:
        with self.cond:
            self._check(conn)
            self._maybe_fault(conn, "crtmh", None)
            hmsg = next(self._hmsgs)
            conn.handles[hmsg] = {"props": {}, "cursor": -1}
            return hmsg

    def mqdltmh(self, conn: Connection, hmsg: int) -> None:
        with self.cond:
            self._check(conn)
            if conn.handles.pop(hmsg, None) is None:
                raise fail(2460)  # MQRC_HMSG_ERROR

    def mqsetmp(self, conn: Connection, hmsg: int, name: str, value: Any, property_type: int) -> None:
        with self.cond:
            self._check(conn)
            if not name or "%" in name or " " in name:
                raise fail(2442)  # MQRC_PROPERTY_NAME_ERROR
            self._handle(conn, hmsg)["props"][name] = (property_type, value)

    def mqinqmp(self, conn: Connection, hmsg: int, name: str, options: int, max_length: int) -> Any:
        with self.cond:
            self._check(conn)
            handle = self._handle(conn, hmsg)
            props: dict[str, tuple[int, Any]] = handle["props"]
            names = list(props)
            wildcard = name == "%" or name.endswith(".%")
            if wildcard:
                prefix = name[:-1]
                candidates = [i for i, n in enumerate(names) if prefix == "" or n.startswith(prefix)]
                if options & CMQC.MQIMPO_INQ_PROP_UNDER_CURSOR:
                    index = handle["cursor"] if handle["cursor"] in candidates else None
                elif options & CMQC.MQIMPO_INQ_NEXT:
                    later = [i for i in candidates if i > handle["cursor"]]
                    index = later[0] if later else None
                else:
                    index = candidates[0] if candidates else None
            else:
                index = names.index(name) if name in names else None
            if index is None:
                raise fail(CMQC.MQRC_PROPERTY_NOT_AVAILABLE)
            handle["cursor"] = index
            prop_name = names[index]
            property_type, value = props[prop_name]
            if isinstance(value, (bytes, str)):
                length = len(value.encode() if isinstance(value, str) else value)
                if length > max_length:
                    raise fail(CMQC.MQRC_PROPERTY_VALUE_TOO_BIG, data_length=length)
            if wildcard and self.wildcard_names:
                return value, prop_name
            return value

    @staticmethod
    def _handle(conn: Connection, hmsg: int) -> dict[str, Any]:
        try:
            return conn.handles[hmsg]
        except KeyError:
            raise fail(2460) from None  # MQRC_HMSG_ERROR
