"""Sampling is a pure function of the sampling key: the same decisions in every process and
after every restart (no per-process hash seed), shadows nest inside graded traffic, and the
configured header, when present, is the key for both."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from proxy.pipeline.admit import sampled
from tests.support.metrics import scraped
from tests.support.paths import REPO
from tests.support.plan_backend import PlanBackend, plan_request
from tests.support.proxy import ProxyFactory, settle

KEYS = [f"conversation-{n}" for n in range(2000)] + ["", "ü", "x" * 1000]
RATES = [0.0, 0.01, 0.1, 0.5, 0.9, 1.0]
SCRIPT = """
import json, sys
from proxy.pipeline.admit import sampled
keys, rates = json.load(sys.stdin)
print(json.dumps([[sampled(k, r) for k in keys] for r in rates]))
"""


def decisions_in_a_new_process(hash_seed: str) -> list[list[bool]]:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        input=json.dumps([KEYS, RATES]),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        cwd=REPO,
        env=env,
    )
    result: list[list[bool]] = json.loads(done.stdout)
    return result


def test_two_processes_with_different_hash_seeds_decide_alike() -> None:
    first, second = decisions_in_a_new_process("1"), decisions_in_a_new_process("4242")
    here = [[sampled(k, r) for k in KEYS] for r in RATES]
    assert first == second == here
    # The control: the builtin hash, which a careless implementation might use, does differ.
    seeded = [
        subprocess.run(
            [sys.executable, "-c", "print(hash('conversation-1'))"],
            capture_output=True, text=True, check=True, timeout=60,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "4242")
    ]  # fmt: skip
    assert seeded[0] != seeded[1]


@pytest.mark.parametrize("rate", RATES)
def test_rates_are_nested_so_shadows_fall_inside_graded_traffic(rate: float) -> None:
    """A key sampled at a rate is sampled at every higher rate."""
    for key in KEYS:
        if sampled(key, rate):
            assert all(sampled(key, higher) for higher in RATES if higher >= rate)


@pytest.mark.parametrize("rate", [0.1, 0.5, 0.9])
def test_the_sampled_share_is_close_to_the_rate(rate: float) -> None:
    share = sum(sampled(key, rate) for key in KEYS) / len(KEYS)
    assert abs(share - rate) < 0.05


async def test_the_sampling_header_is_the_key_for_grading_and_shadows(
    make_shadow_proxy: ProxyFactory, shadow: PlanBackend, shadow_url: str, results_path: Path
) -> None:
    """Requests of one conversation share a fate; different request ids do not matter."""
    inside = next(k for k in KEYS if sampled(k, 0.5) and sampled(k, 0.3))
    outside = next(k for k in KEYS if not sampled(k, 0.5))
    shadow_out = next(k for k in KEYS if sampled(k, 0.5) and not sampled(k, 0.3))
    client = await make_shadow_proxy(
        upstream={"shadow": {"url": shadow_url, "sample_rate": 0.3}},
        grading={"sample_rate": 0.5, "sampling_header": "X-Conversation-Id"},
    )
    for conversation in (inside, inside, outside, shadow_out):
        await client.post(
            "/v1/chat/completions",
            data=plan_request("pass", "pass"),
            headers={"X-Grade-Task": "weather.single", "X-Conversation-Id": conversation},
        )
    rows = await settle(client, results_path)
    assert sorted(r["variant"] for r in rows) == ["primary"] * 3 + ["shadow"] * 2
    assert await scraped(client, "gradeproxy_grading_skipped_total", reason="sampled_out") == 1
    assert await scraped(client, "gradeproxy_shadow_requests_total", result="ok") == 2
    assert await scraped(client, "gradeproxy_shadow_requests_total", result="sampled_out") == 2
