"""An episode row's ``usage`` is the sum of its turns' usage (proxy/pipeline/episodeusage.py),
and it carries the request's ``key_id`` like every row; the backend answers each turn with a
chat.completion in OpenAI's exact shape, its usage different per turn."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from proxy.pipeline.episodeusage import EpisodeUsage
from tests.support.backend import Reply, ScriptedBackend
from tests.support.episodes import GOOD_BILLING, GOOD_BILLING_FINAL, chat, completion
from tests.support.proxy import ProxyFactory, rows_of
from tests.support.tasks import BILLING, EPISODES

pytestmark = pytest.mark.task_file(EPISODES)
Client = TestClient[web.Request, web.Application]
NONE = {"input_tokens": None, "output_tokens": None, "cached_input_tokens": None,
        "reasoning_tokens": None}  # fmt: skip


@pytest.mark.parametrize(
    ("turns", "expected"),
    [
        pytest.param([], None, id="no_turn_reported_usage"),
        pytest.param([None, None], None, id="turns_without_usage_add_nothing"),
        pytest.param(
            [{**NONE, "input_tokens": 10, "output_tokens": 2}],
            {**NONE, "input_tokens": 10, "output_tokens": 2},
            id="one_turn",
        ),
        pytest.param(
            [
                {**NONE, "input_tokens": 10, "output_tokens": 2},
                None,
                {**NONE, "input_tokens": 30, "output_tokens": 5, "cached_input_tokens": 8},
            ],
            {"input_tokens": 40, "output_tokens": 7, "cached_input_tokens": 8,
             "reasoning_tokens": None},
            id="a_count_one_turn_reported_is_that_turns",
        ),
    ],
)  # fmt: skip
def test_the_sum(turns: list[dict[str, Any] | None], expected: dict[str, Any] | None) -> None:
    sums = EpisodeUsage()
    for usage in turns:
        sums.add("ep", usage)
    sums.add("other", {**NONE, "input_tokens": 1000})
    assert sums.take("ep") == expected
    assert sums.take("ep") is None  # taken: a retried last turn starts again
    assert len(sums) == 1


def test_the_oldest_episode_is_forgotten_past_the_bound() -> None:
    sums = EpisodeUsage(max_episodes=2)
    for episode in ("a", "b", "a", "c"):  # "a" was added to again: "b" is the oldest
        sums.add(episode, {**NONE, "input_tokens": 1})
    assert (sums.take("b"), len(sums)) == (None, 2)
    assert sums.take("a") == {**NONE, "input_tokens": 2}


async def _drive(
    client: Client, backend: ScriptedBackend, headers: dict[str, str]
) -> list[dict[str, Any]]:
    """The billing agent's loop, each turn's answer reporting its own usage; the usages."""
    history = chat(GOOD_BILLING, GOOD_BILLING_FINAL)
    usages = []
    for number, index in enumerate(i for i, m in enumerate(history) if m["role"] == "assistant"):
        body = json.loads(completion(history[index]))
        body["usage"] = {
            "prompt_tokens": 100 * (number + 1),
            "completion_tokens": number + 1,
            "total_tokens": 101 * (number + 1),
            "prompt_tokens_details": {"cached_tokens": 64 if number == 2 else 0},
        }
        usages.append(body["usage"])
        backend.replies.append(Reply(body=json.dumps(body).encode()))
        response = await client.post(
            "/v1/chat/completions",
            json={"model": "gpt-4.1-mini", "messages": history[:index]},
            headers={"X-Grade-Task": BILLING, **headers},
        )
        assert response.status == 200
        await response.read()
    return usages


async def test_the_episode_row_sums_its_turns_usage(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    results_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTS_KEY", "sk-agents")
    client = await make_proxy(auth={"keys": [{"id": "agents", "secret_env": "AGENTS_KEY"}]})
    usages = await _drive(client, backend, {"X-Grade-Episode": "ep-u", "X-Gradeproxy-Key":
                                            "sk-agents"})  # fmt: skip
    [row] = await rows_of(client, results_path)
    assert (row["kind"], row["turns"]) == ("episode", len(usages))
    assert row["usage"] == {
        "input_tokens": sum(u["prompt_tokens"] for u in usages),
        "output_tokens": sum(u["completion_tokens"] for u in usages),
        "cached_input_tokens": 64,
        "reasoning_tokens": None,  # no turn reported it: not 0
    }
    assert row["key_id"] == "agents"


async def test_without_an_episode_id_the_row_has_its_last_turns_usage(
    make_proxy: ProxyFactory, backend: ScriptedBackend, results_path: Path
) -> None:
    client = await make_proxy()
    usages = await _drive(client, backend, {})
    [row] = await rows_of(client, results_path)
    assert row["usage"]["input_tokens"] == usages[-1]["prompt_tokens"]
    assert row["key_id"] is None
