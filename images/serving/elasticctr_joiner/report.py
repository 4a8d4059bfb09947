"""Each served version's online quality to the MLflow run that trained it: the metrics
`online_auc`, `online_calibration`, `online_log_loss`, `online_examples` and
`online_clicks` (its window's) at step = the version, so that MLflow's UI charts online
quality version by version beside the run's held-out AUC. The run is found through the
model registry (trainer 0 registers every published version with its run:
elasticctr_common.registry).

Off the joiner's loop, on a thread of its own that always reports the newest figures: a
slow or unreachable MLflow never holds a partition back. What it could not report it says
in `last_error` (the joiner's /status), and tries again at the next close.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from elasticctr_common.online_eval import Quality
from elasticctr_common.registry import ModelRegistry, RegistryError

log = logging.getLogger(__name__)
PREFIX = "online_"


def run_metrics(quality: Quality) -> dict[str, float]:
    """The figures MLflow takes (it has no null: an undefined one is left out)."""
    return {PREFIX + k: float(v) for k, v in quality.as_json().items() if v is not None}


class OnlineReporter:
    def __init__(self, registry: ModelRegistry) -> None:
        self.registry = registry
        self.runs: dict[int, str] = {}  # version -> its run, once found
        self.reported: dict[int, int] = {}  # version -> times reported
        self.last_error = ""
        self._pending: dict[int, Quality] | None = None
        self._wake = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="online-report", daemon=True)
        self._thread.start()

    def submit(self, online: dict[int, Quality]) -> None:
        """Report these figures soon (newer ones replace any not reported yet)."""
        with self._wake:
            self._pending = dict(online)
            self._wake.notify()

    def status(self) -> dict[str, Any]:
        return {
            "registered_model": self.registry.model_name,
            "runs": {str(v): r for v, r in sorted(self.runs.items())},
            "last_error": self.last_error,
        }

    def stop(self, timeout: float = 5.0) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify()
        self._thread.join(timeout)

    def _loop(self) -> None:
        while True:
            with self._wake:
                while self._pending is None and not self._stopping:
                    self._wake.wait()
                if self._stopping:
                    return
                online, self._pending = self._pending or {}, None
            self.report(online)

    def report(self, online: dict[int, Quality]) -> None:
        now_ms = int(time.time() * 1000)
        errors = []
        for version, quality in sorted(online.items()):
            try:
                run = self.runs.get(version) or self.registry.run_of(version)
                if run is None:
                    continue  # not registered (yet), or registered without its run
                self.runs[version] = run
                self.registry.log_metrics(run, run_metrics(quality), version, now_ms)
                self.reported[version] = self.reported.get(version, 0) + 1
            except RegistryError as err:
                errors.append(f"version {version}: {err}")
        if errors:
            log.warning("online quality not logged to MLflow: %s", "; ".join(errors))
        self.last_error = "; ".join(errors)
