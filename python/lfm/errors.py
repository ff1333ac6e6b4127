"""The exceptions a call through lfm can end with. Each carries the call's Report (a dict,
docs/report.md) when the call ran, and pickles, so it survives the trip back through Parsl
or Dask."""

from __future__ import annotations

from typing import Any, Dict, Optional

Report = Dict[str, Any]


class LfmError(Exception):
    """Base of lfm's own errors; `report` is the call's Report, or None when it never ran."""

    def __init__(self, message: str, report: Optional[Report] = None):
        super().__init__(message)
        self.report = report

    def __reduce__(self):
        return (type(self), (str(self), self.report))


class BinaryNotFound(LfmError, FileNotFoundError):
    """No lfm binary: neither LFM_BIN nor an installed lfm-toolkit gives one."""


class ServeError(LfmError):
    """The node's `lfm serve` could not be started, or died (or was lost) mid-call."""


class LimitExceeded(LfmError):
    """The call was killed for exceeding a limit; `limits` names which (and by how much)."""

    @property
    def limits(self) -> Dict[str, Any]:
        return dict((self.report or {}).get("limits_exceeded") or {})


class CallError(LfmError):
    """The call ended without a value or an exception: a signal (a segfault), os._exit, the
    zygote's death, or a refusal (no such target). `reason` is the serve protocol's."""

    def __init__(self, message: str, report: Optional[Report] = None, reason: str = "error"):
        super().__init__(message, report)
        self.reason = reason

    def __reduce__(self):
        return (type(self), (str(self), self.report, self.reason))


class SerializationError(LfmError):
    """An argument, a function or a result could not be pickled or unpickled."""


class RemoteError(LfmError):
    """The function raised an exception that could not be brought back as itself (it did not
    pickle, or its class is not importable here): its type name, message and traceback."""

    def __init__(self, message: str, report: Optional[Report] = None, type_name: str = ""):
        super().__init__(message, report)
        self.type_name = type_name

    def __reduce__(self):
        return (type(self), (str(self), self.report, self.type_name))


class RemoteTraceback(Exception):
    """The remote traceback, chained as `__cause__` of a re-raised remote exception so that
    printing the exception shows where it was raised on the other side."""

    def __init__(self, traceback: str):
        super().__init__(traceback)
        self.traceback = traceback

    def __str__(self) -> str:
        return "\n\"\"\"\n" + self.traceback.rstrip() + "\n\"\"\""
