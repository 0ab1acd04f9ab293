"""The loaded task set, swapped atomically on reload (SIGHUP, or a file change when watched).

A reload that fails keeps the old set and logs why: a bad edit never takes grading down. The
price table (``pricing.path``) and the route policies (``enforce.path``, docs/enforce.md) are
read with the tasks and swapped with them: a reload whose table or policy file is bad keeps the
old tasks, the old table and the old policies. A policy file works without a task set too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from grader.enforce import EnforceError
from grader.loader import load_tasks
from grader.pricing import PriceTable, PriceTableError, load_prices
from grader.route_policy import RoutePolicies, load_policies
from grader.tasks import TaskLoadError, TaskSet, task_files
from proxy.logs import get_logger
from proxy.pipeline.enforce.judge import warm
from proxy.pipeline.record.metrics import ProxyMetrics

log = get_logger("gradeproxy.tasks")


class TaskStore:
    """Holds the current :class:`TaskSet`; readers take ``store.current`` once per request."""

    def __init__(
        self,
        path: Path | None,
        metrics: ProxyMetrics,
        allow_start_without: bool = False,
        prices_path: Path | None = None,
        policies_path: Path | None = None,
    ) -> None:
        self.path = path
        self.prices_path = prices_path
        self.prices: PriceTable | None = None  # swapped with ``current``, never apart
        self.policies_path = policies_path
        self.policies: RoutePolicies | None = None  # likewise (grader/route_policy.py)
        self.metrics = metrics
        self.current: TaskSet | None = None
        self.allow_start_without = allow_start_without
        self.error: str | None = None  # why the last load failed (file:line), for /readyz
        self._attempted = False
        self._stamp: tuple[tuple[str, float, int], ...] = ()
        # Called with each newly loaded set (the grading process gets it: proxy/pipeline/queue.py).
        self.listeners: list[Callable[[TaskSet], None]] = []

    @property
    def ready(self) -> bool:
        """Ready once a task set is loaded, or at once when no tasks are configured; with
        ``tasks.allow_start_without``, also once a first load has been tried and failed."""
        if self.path is None or self.current is not None:
            return True
        return self.allow_start_without and self._attempted

    def _fingerprint(self) -> tuple[tuple[str, float, int], ...]:
        files: list[Path] = []
        if self.path is not None:
            try:
                files = task_files(self.path)
            except TaskLoadError:
                files = []
        if self.policies_path is not None:
            files.append(self.policies_path)
        stamps = []
        for file in files:
            try:
                stat = file.stat()
            except OSError:
                continue
            stamps.append((str(file), stat.st_mtime, stat.st_size))
        return tuple(stamps)

    async def reload(self) -> bool:
        """Load the task set off the event loop; keep the old one on any error."""
        if self.path is None and self.policies_path is None:
            return True
        path, policies_path = self.path, self.policies_path
        try:
            stamp = await asyncio.to_thread(self._fingerprint)
            tasks = None if path is None else await asyncio.to_thread(load_tasks, path)
            prices_path = self.prices_path
            prices = (
                None if prices_path is None else await asyncio.to_thread(load_prices, prices_path)
            )
            policies = (
                None
                if policies_path is None
                else await asyncio.to_thread(load_policies, policies_path)
            )
            # the first enforced answer must not pay for the checks' lazy imports
            await asyncio.to_thread(warm, tasks, policies)
        except (TaskLoadError, PriceTableError, EnforceError) as exc:
            self._attempted = True
            self.error = str(exc)
            self.metrics.task_reloads.labels("error").inc()
            log.error(
                "tasks_reload_failed",
                error=str(exc),
                kept_digest=self.current.digest if self.current else None,
            )
            return False
        self._stamp = stamp
        self._attempted, self.error = True, None
        self.policies = policies
        if policies is not None:
            log.info("policies_loaded", policies=len(policies.policies), digest=policies.digest)
        if tasks is None:
            self.metrics.task_reloads.labels("ok").inc()
            return True
        previous = self.current
        self.current, self.prices = tasks, prices
        self.metrics.set_task_set(tasks)
        self.metrics.task_reloads.labels("ok").inc()
        for listener in self.listeners:
            listener(tasks)
        log.info(
            "tasks_loaded",
            tasks=len(tasks),
            digest=tasks.digest,
            previous_digest=previous.digest if previous else None,
            sources=list(tasks.sources),
        )
        return True

    async def watch(self, interval_s: float) -> None:
        """Poll file stamps and reload on change (portable; no inotify dependency)."""
        while True:
            await asyncio.sleep(interval_s)
            stamp = await asyncio.to_thread(self._fingerprint)
            if stamp != self._stamp:
                self._stamp = stamp  # a failed load is not retried until the files change again
                await self.reload()
