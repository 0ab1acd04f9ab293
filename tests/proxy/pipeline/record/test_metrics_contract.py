"""The exposition is the contract in deploy/metrics.json: every stable metric with exactly its
labels, nothing undocumented, bounded label values, and promtool's lint passes."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.support.backend import ScriptedBackend
from tests.support.paths import REPO
from tests.support.proxy import ProxyFactory, rows_of
from tests.support.tools import require_tool

CONTRACT: dict[str, Any] = json.loads((REPO / "deploy" / "metrics.json").read_text())["metrics"]
STABLE = {name: spec for name, spec in CONTRACT.items() if spec["status"] == "stable"}
HISTOGRAM_SUFFIXES = ("_bucket", "_count", "_sum")


async def exposition(make_proxy: ProxyFactory, results_path: Path) -> str:
    client = await make_proxy()
    for headers in ({"X-Grade-Task": "weather.single"}, {"X-Grade-Task": "nope"}, {}):
        await client.post("/v1/chat/completions", data=b"{}", headers=headers)
    await client.get("/v1/models")
    await rows_of(client, results_path)
    return await (await client.get("/metrics")).text()


def families(text: str) -> dict[str, tuple[str, set[frozenset[str]]]]:
    found: dict[str, tuple[str, set[frozenset[str]]]] = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("gradeproxy_"):
            continue
        name = family.name + ("_total" if family.type == "counter" else "")
        label_sets = {frozenset(k for k in s.labels if k != "le") for s in family.samples}
        found[name] = (family.type, label_sets)
    return found


async def test_every_stable_metric_is_exposed_with_its_labels(
    make_proxy: ProxyFactory, backend: ScriptedBackend, results_path: Path
) -> None:
    found = families(await exposition(make_proxy, results_path))
    for name, spec in STABLE.items():
        assert name in found, f"{name} is in the contract but not exposed"
        kind, label_sets = found[name]
        assert kind == spec["type"], name
        for labels in label_sets:
            assert labels == set(spec["labels"]), (name, labels)


async def test_nothing_undocumented_is_exposed(
    make_proxy: ProxyFactory, results_path: Path
) -> None:
    found = families(await exposition(make_proxy, results_path))
    assert set(found) <= set(CONTRACT), set(found) - set(CONTRACT)


async def test_closed_label_values_stay_closed(
    make_proxy: ProxyFactory, results_path: Path
) -> None:
    text = await exposition(make_proxy, results_path)
    for family in text_string_to_metric_families(text):
        name = family.name + ("_total" if family.type == "counter" else "")
        allowed = CONTRACT.get(name, {}).get("label_values", {})
        for sample in family.samples:
            for label, values in allowed.items():
                if label in sample.labels:
                    assert sample.labels[label] in values, (name, label, sample.labels[label])


async def test_task_label_only_takes_loaded_ids(
    make_proxy: ProxyFactory, results_path: Path
) -> None:
    text = await exposition(make_proxy, results_path)
    loaded = {"weather.single", "weather.city_only", "time.tokyo"}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if "task" in sample.labels:
                assert sample.labels["task"] in loaded, sample


async def test_promtool_accepts_the_exposition(
    make_proxy: ProxyFactory, results_path: Path
) -> None:
    tool = require_tool("promtool")
    text = await exposition(make_proxy, results_path)
    result = await asyncio.to_thread(
        subprocess.run,
        [tool, "check", "metrics"],
        input=text,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
