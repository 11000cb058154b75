"""The Windows service: a thin pywin32 layer over `service.controller.ServiceController`.

Windows only (`pip install "mqbridge[windows]"`): this module imports pywin32 at the top, and
nothing imports it on other platforms. One service class serves every installed bridge; the
service's name says which (`mqbridge-<name>`) and its registry parameter `config` names the
configuration file.

- STOP and SHUTDOWN set the bridge's stop event; the controller reports SERVICE_STOP_PENDING
  with wait hints (pywin32 counts the checkpoints) while the graceful drain runs.
- PARAMCHANGE (`sc control mqbridge-<name> paramchange`) reloads plugins and the configuration,
  like SIGHUP on Linux.
- Warnings and errors go to the Windows Event Log (source: the service name). A run that ends
  with a non-zero status raises, so the service manager records a failure and applies the
  recovery actions set at install (restart after 5 s).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import servicemanager
import win32service
import win32serviceutil

from mqbridge.config import BridgeConfig
from mqbridge.errors import BridgeExitError
from mqbridge.service.controller import (
    RUNNING,
    STOP_PENDING,
    EventLogHandler,
    ServiceController,
    configure_service_logging,
    describe_exit,
)

# STOPPED is not reported from here: pythonservice.exe reports it when SvcRun returns.
_STATES = {RUNNING: win32service.SERVICE_RUNNING, STOP_PENDING: win32service.SERVICE_STOP_PENDING}


class MqbridgeService(win32serviceutil.ServiceFramework):  # type: ignore[misc]  # pywin32 is untyped
    """The service class pythonservice.exe runs for every `mqbridge-<name>` service."""

    _svc_name_ = "mqbridge"
    _svc_display_name_ = "mqbridge"
    _svc_description_ = "Moves messages from message queues into Spark tables."

    def __init__(self, args: list[str]) -> None:
        self._svc_name_ = args[0]
        super().__init__(args)
        config = win32serviceutil.GetServiceCustomOption(args[0], "config")
        self.controller = ServiceController(config, self._report, configure_logging=_configure_logging)

    def GetAcceptedControls(self) -> int:
        return int(super().GetAcceptedControls()) | int(win32service.SERVICE_ACCEPT_PARAMCHANGE)

    def _report(self, state: str, wait_hint_ms: int) -> None:
        if state in _STATES:
            self.ReportServiceStatus(_STATES[state], waitHint=wait_hint_ms)

    def SvcStop(self) -> None:
        self.ReportServiceStatus(win32service.SERVICE_STOP_PENDING, waitHint=5000)
        self.controller.request_stop()

    def SvcShutdown(self) -> None:
        self.SvcStop()

    def SvcOtherEx(self, control: int, event_type: int, data: Any) -> None:
        if control == win32service.SERVICE_CONTROL_PARAMCHANGE:
            self.controller.request_reload()

    def SvcDoRun(self) -> None:
        # Until the configuration is read (its errors never hold a secret value), the Event Log
        # alone; then the configured log file and a redacting Event Log (`_configure_logging`).
        logging.getLogger().addHandler(_EVENT_LOG)
        servicemanager.LogMsg(servicemanager.EVENTLOG_INFORMATION_TYPE, servicemanager.PYS_SERVICE_STARTED,
                              (self._svc_name_, ""))
        code = self.controller.run()
        if code != 0:
            raise BridgeExitError(f"{self._svc_name_}: {describe_exit(code)}")
        servicemanager.LogInfoMsg(f"{self._svc_name_}: {describe_exit(code)}")


_EVENT_LOG = EventLogHandler(servicemanager.LogWarningMsg, servicemanager.LogErrorMsg)


def _configure_logging(config: BridgeConfig) -> None:
    configure_service_logging(config, _EVENT_LOG)


def service_name(bridge_name: str) -> str:
    return f"mqbridge-{bridge_name}"


def install(config_file: Path, bridge_name: str) -> str:
    """Install (or update) the service of one configuration, started automatically, restarted on failure."""
    name = service_name(bridge_name)
    class_string = win32serviceutil.GetServiceClassString(MqbridgeService)
    try:
        win32serviceutil.InstallService(class_string, name, f"mqbridge {bridge_name}",
                                        startType=win32service.SERVICE_AUTO_START,
                                        description=MqbridgeService._svc_description_)
    except win32service.error as exc:
        if exc.winerror != 1073:  # ERROR_SERVICE_EXISTS: update it instead
            raise
        win32serviceutil.ChangeServiceConfig(class_string, name, startType=win32service.SERVICE_AUTO_START,
                                             description=MqbridgeService._svc_description_)
    win32serviceutil.SetServiceCustomOption(name, "config", str(config_file))
    _restart_on_failure(name)
    return name


def _restart_on_failure(name: str) -> None:
    manager = win32service.OpenSCManager(None, None, win32service.SC_MANAGER_ALL_ACCESS)
    try:
        handle = win32service.OpenService(manager, name, win32service.SERVICE_ALL_ACCESS)
        try:
            actions = {"ResetPeriod": 86400, "RebootMsg": "", "Command": "",
                       "Actions": [(win32service.SC_ACTION_RESTART, 5000)] * 3}
            win32service.ChangeServiceConfig2(handle, win32service.SERVICE_CONFIG_FAILURE_ACTIONS, actions)
            win32service.ChangeServiceConfig2(handle, win32service.SERVICE_CONFIG_FAILURE_ACTIONS_FLAG, True)
        finally:
            win32service.CloseServiceHandle(handle)
    finally:
        win32service.CloseServiceHandle(manager)


def remove(bridge_name: str) -> str:
    name = service_name(bridge_name)
    win32serviceutil.RemoveService(name)
    return name


def start(bridge_name: str) -> str:
    name = service_name(bridge_name)
    win32serviceutil.StartService(name)
    win32serviceutil.WaitForServiceStatus(name, win32service.SERVICE_RUNNING, 120)
    return name


def stop(bridge_name: str, wait: float) -> str:
    name = service_name(bridge_name)
    win32serviceutil.StopService(name)
    win32serviceutil.WaitForServiceStatus(name, win32service.SERVICE_STOPPED, wait)
    return name
