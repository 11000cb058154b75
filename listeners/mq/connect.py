"""Connecting to an IBM MQ queue manager as a client: building the MQCD/MQSCO/MQCNO from the
`[sources.X]` settings (validated by `MqSourceConfig`, not here), opening the input queue and
inquiring the attributes that drive poison-message handling (BOTHRESH, BOQNAME, DEADQ, MAXUMSGS)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from mqbridge.config import MqSourceConfig
from mqbridge.listeners.mq.driver import reason_of, wrap
from mqbridge.listeners.mq.mapping import text

log = logging.getLogger(__name__)

DEFAULT_MAX_UNCOMMITTED = 10_000  # MAXUMSGS default, used when the queue manager cannot be inquired
MQRC_NOT_AUTHORIZED = 2035


@dataclass(frozen=True)
class QueueSettings:
    """What the queue manager says about the consumed queue (before listener overrides)."""

    backout_threshold: int  # BOTHRESH (0: no backout handling)
    backout_queue: str  # BOQNAME ("" if blank or not inquirable)
    dead_letter_queue: str  # the queue manager's DEADQ
    max_uncommitted: int  # MAXUMSGS


def connect_options(cmqc: Any, reconnect: bool | str) -> int:
    """MQCNO options: client binding plus the configured automatic-reconnect behaviour
    (`MqSourceConfig.reconnect`, already validated: true, false, "qmgr", "any", "disabled", "as_def")."""
    choices = {"as_def": cmqc.MQCNO_RECONNECT_AS_DEF, True: cmqc.MQCNO_RECONNECT, "any": cmqc.MQCNO_RECONNECT,
               "qmgr": cmqc.MQCNO_RECONNECT_Q_MGR, False: cmqc.MQCNO_RECONNECT_DISABLED,
               "disabled": cmqc.MQCNO_RECONNECT_DISABLED}
    return int(getattr(cmqc, "MQCNO_CLIENT_BINDING", 0)) | int(choices[reconnect])


def connect_qmgr(driver: Any, errors: tuple[type[BaseException], ...], cfg: MqSourceConfig, options: int) -> Any:
    """A connected QueueManager that never disconnects from garbage collection (MQDISC commits)."""
    channels = getattr(driver, "CMQXC", driver.CMQC)
    cd = driver.CD()
    cd.ChannelName = cfg.channel.encode()
    cd.ConnectionName = cfg.conn_name.encode()
    cd.ChannelType = getattr(channels, "MQCHT_CLNTCONN", 6)
    cd.TransportType = getattr(channels, "MQXPT_TCP", 2)
    sco = driver.SCO()
    if cfg.cipher_spec:
        cd.SSLCipherSpec = cfg.cipher_spec.encode()
    if cfg.key_repository:
        sco.KeyRepository = cfg.key_repository.encode()
    label = cfg.certificate_label
    if label:
        if hasattr(sco, "CertificateLabel"):
            sco.CertificateLabel = label.encode()
        else:  # older structures: the label goes in the MQCD (version 11)
            cd.CertificateLabel = label.encode()
            cd.Version = max(cd.Version, 11)
    kwargs: dict[str, Any] = {"cd": cd, "sco": sco, "opts": options}
    if cfg.user:
        # The configuration refuses a user without a password (MqSourceConfig).
        password = cfg.password.get_secret_value() if cfg.password is not None else None
        kwargs.update(user=cfg.user, password=password)
    qmgr = driver.QueueManager(None, disconnect_on_exit=False)
    what = f"MQCONNX to {cfg.queue_manager} via {cfg.channel} at {cfg.conn_name}"
    try:
        qmgr.connect_with_options(cfg.queue_manager, **kwargs)
    except errors as exc:
        if getattr(exc, "comp", None) != 1:  # a warning (MQCC_WARNING) still connects
            raise wrap(exc, what, at_connect=True) from exc
        log.warning("%s: %s", what, exc)
    return qmgr


def open_input(driver: Any, errors: tuple[type[BaseException], ...], qmgr: Any, where: str,
               destination: str, selector: str | None = None) -> tuple[Any, bool]:
    """The queue opened for input (and inquire, when authorised): (queue, inquirable). With a
    `selector`, MQOPEN carries it as the MQOD's SelectionString: every MQGET on this handle then
    sees only the messages whose properties match it."""
    c = driver.CMQC
    options = c.MQOO_INPUT_AS_Q_DEF | c.MQOO_FAIL_IF_QUIESCING
    what = f"MQOPEN of {where} for input" + (f" with selection string {selector!r}" if selector else "")
    try:
        return driver.Queue(qmgr, _descriptor(driver, destination, selector), options | c.MQOO_INQUIRE), True
    except errors as exc:
        if reason_of(exc) != MQRC_NOT_AUTHORIZED:
            raise wrap(exc, what, at_connect=True) from exc
    log.warning("%s: not authorised to inquire the queue; BOTHRESH/BOQNAME are not read (grant +inq, or set "
                "the listener's backout_threshold and backout_queue)", what)
    try:
        return driver.Queue(qmgr, _descriptor(driver, destination, selector), options), False
    except errors as exc:
        raise wrap(exc, what, at_connect=True) from exc


def _descriptor(driver: Any, destination: str, selector: str | None) -> Any:
    """The queue name, or with a selector an MQOD of version 4 (the first with SelectionString)."""
    if not selector:
        return destination.encode()
    od = driver.OD(ObjectName=destination.encode(), Version=driver.CMQC.MQOD_VERSION_4)
    od.SelectionString = selector.encode()
    return od


def inquire_settings(cmqc: Any, errors: tuple[type[BaseException], ...], qmgr: Any, queue: Any,
                     inquirable: bool, where: str, qmgr_name: str) -> QueueSettings:
    """BOTHRESH and BOQNAME of the queue, DEADQ and MAXUMSGS of the queue manager, inquired once."""
    def ask(obj: Any, selector: int, what: str, default: Any) -> Any:
        try:
            return obj.inquire(selector)
        except errors as exc:
            if reason_of(exc) != MQRC_NOT_AUTHORIZED:
                raise wrap(exc, f"MQINQ {what} of {where}") from exc
            log.warning("not authorised to inquire %s of %s; using %r", what, where, default)
            return default

    threshold, boq = 0, ""
    if inquirable:
        threshold = int(ask(queue, cmqc.MQIA_BACKOUT_THRESHOLD, "BOTHRESH", 0))
        boq = text(ask(queue, cmqc.MQCA_BACKOUT_REQ_Q_NAME, "BOQNAME", b""))
    return QueueSettings(
        backout_threshold=threshold,
        backout_queue=boq,
        dead_letter_queue=text(ask(qmgr, cmqc.MQCA_DEAD_LETTER_Q_NAME, f"DEADQ of {qmgr_name}", b"")),
        max_uncommitted=int(ask(qmgr, cmqc.MQIA_MAX_UNCOMMITTED_MSGS, f"MAXUMSGS of {qmgr_name}",
                                DEFAULT_MAX_UNCOMMITTED)),
    )
