"""What a shipped call tells the engine it runs in, beyond its value: in a Dask worker, its
Report joins the scheduler's "lfm-report" events, where lfm.dask's own tasks put theirs
(`lfm.dask.reports`). Engine-neutral: a shipped call may run under Parsl, where distributed is
not installed, so the Dask worker is found only where distributed is loaded already."""

from __future__ import annotations

import sys
from typing import Any, Dict, Optional

DASK_TOPIC = "lfm-report"


def tell_dask(report: Optional[Dict[str, Any]]) -> None:
    """In a Dask worker's task, log `report` to the scheduler's events (else nothing)."""
    get_worker = getattr(sys.modules.get("distributed"), "get_worker", None)
    if report is None or get_worker is None:
        return
    try:
        worker = get_worker()
    except ValueError:  # not in a worker
        return
    task = getattr(worker, "get_current_task", lambda: None)()
    worker.log_event(DASK_TOPIC, {"key": str(task), "report": report})
