"""The other workers' scoreboard counts, so every worker's live page shows the whole proxy.

With ``listen.workers`` > 1 each worker keeps its own registry (proxy/supervisor.py says why),
so one worker's counters are a part of the traffic. The page on any worker's admin port asks the
others for theirs (``/ui/worker.json`` on ``admin.port + i``, loopback, at most once a second as
the page's reading is shared) and adds them up. A worker that does not answer in time (it is
restarting) is named in ``workers.missing`` rather than counted as zero. Prometheus sums the
workers itself: each is its own scrape target.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from proxy.config import Config
from proxy.state import WorkerInfo

PEER_TIMEOUT_S = 2.0
_ANY = ("0.0.0.0", "::", "")


def peer_urls(config: Config, worker: WorkerInfo) -> dict[int, str]:
    """Every other worker's ``/ui/worker.json``, by index."""
    host = config.admin.host or config.listen.host
    if host in _ANY:
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return {
        index: f"http://{host}:{port}/ui/worker.json"
        for index, port in enumerate(worker.admin_ports)
        if index != worker.index
    }


async def read_peers(config: Config, worker: WorkerInfo) -> tuple[list[dict[str, Any]], list[int]]:
    """The readings of the workers that answered, and the indices of those that did not."""
    keys = config.inbound_secrets()
    headers = {"Authorization": f"Bearer {keys[0]}"} if keys else {}
    urls = peer_urls(config, worker)
    timeout = aiohttp.ClientTimeout(total=PEER_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout, headers=headers) as session:
        answers = await asyncio.gather(
            *(_read(session, url) for url in urls.values()), return_exceptions=True
        )
    readings: list[dict[str, Any]] = []
    missing: list[int] = []
    for index, answer in zip(urls, answers, strict=True):
        if isinstance(answer, dict):
            readings.append(answer)
        else:
            missing.append(index)
    return readings, missing


async def _read(session: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with session.get(url) as response:
        response.raise_for_status()
        reading: dict[str, Any] = await response.json()
    return reading
