"""The LLM judge against a fake client: strict verdicts, retries, timeouts, limits, pinning."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import grader
from grader import parse_task
from grader.checks import (
    CheckContext,
    CheckDefinitionError,
    Judge,
    JudgeConfig,
    Sample,
    build_check,
    model_family,
    pinned_problem,
)
from grader.engine import grade_async

Reply = str | BaseException


class FakeJudge:
    """Replies in order (the last one repeats); records every request."""

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies)
        self.requests: list[tuple[str, list[dict[str, str]], float]] = []

    async def complete(self, model: str, messages: list[dict[str, str]], temperature: float) -> str:
        self.requests.append((model, messages, temperature))
        reply = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        if isinstance(reply, BaseException):
            raise reply
        return reply


CRITERION = {
    "type": "label_model",
    "name": "polite",
    "model": "claude-3-5-haiku-20241022",
    "criterion": "The reply apologises and gives a next step.",
    "pass_examples": ["Sorry! Your refund is on its way."],
    "fail_examples": ["Not our problem."],
}
ITEM = {"prompt": "Reply to an angry customer."}


async def grade(
    definition: dict[str, Any],
    *replies: Reply,
    retries: int = 2,
    answer: str = "Sorry!",
    graded_model: str | None = None,
) -> tuple[Any, FakeJudge]:
    fake = FakeJudge(*replies)
    judge = Judge(fake, JudgeConfig(retries=retries))
    check = build_check(definition)
    result = await check.arun(
        Sample.from_answer(answer), ITEM, CheckContext(model=graded_model), judge
    )
    return result, fake


@pytest.mark.parametrize(
    ("replies", "passed", "code", "attempts"),
    [
        pytest.param(["PASS"], True, "judge_pass", 1, id="pass"),
        pytest.param(["FAIL"], False, "judge_fail", 1, id="fail"),
        pytest.param([" PASS\n"], True, "judge_pass", 1, id="surrounding_whitespace_stripped"),
        pytest.param(["pass"], None, "judge_parse_error", 3, id="lower_case_is_not_the_contract"),
        pytest.param(["PASS."], None, "judge_parse_error", 3, id="trailing_period"),
        pytest.param([""], None, "judge_parse_error", 3, id="empty_reply"),
        pytest.param(
            ["The response is polite. PASS"],
            None,
            "judge_parse_error",
            3,
            id="prose_around_verdict",
        ),
        pytest.param(["PASS FAIL"], None, "judge_parse_error", 3, id="both_words"),
        pytest.param([TimeoutError()], None, "judge_timeout", 3, id="timeouts"),
        pytest.param([ConnectionError("reset")], None, "judge_error", 3, id="transport_error"),
        pytest.param(["garbage", "PASS"], True, "judge_pass", 2, id="retry_then_pass"),
        pytest.param([TimeoutError(), "FAIL"], False, "judge_fail", 2, id="timeout_then_fail"),
        pytest.param(["?", "?", "FAIL"], False, "judge_fail", 3, id="last_retry_counts"),
        pytest.param(["?", "?", "?", "PASS"], None, "judge_parse_error", 3, id="retries_bounded"),
    ],
)
async def test_binary_verdicts(
    replies: list[Reply], passed: bool | None, code: str, attempts: int
) -> None:
    result, fake = await grade(CRITERION, *replies)
    assert (result.passed, result.reason_code) == (passed, code)
    assert result.details["attempts"] == attempts
    assert len(fake.requests) == attempts
    assert (result.error is None) is (passed is not None)


async def test_no_retries_configured() -> None:
    result, fake = await grade(CRITERION, "garbage", "PASS", retries=0)
    assert (result.passed, result.reason_code, len(fake.requests)) == (None, "judge_parse_error", 1)


async def test_requests_are_pinned_deterministic_and_use_the_seed_prompt() -> None:
    _, fake = await grade(CRITERION, "PASS", answer="Sorry, refund sent.")
    model, messages, temperature = fake.requests[0]
    assert (model, temperature) == ("claude-3-5-haiku-20241022", 0.0)
    (message,) = messages
    prompt = message["content"]
    assert prompt.startswith(
        "You are grading whether a response meets the following "
        "criterion: The reply apologises and gives a next step."
    )
    assert "Examples of PASS:\n- Sorry! Your refund is on its way." in prompt
    assert "Examples of FAIL:\n- Not our problem." in prompt
    assert "Output exactly one word, PASS or FAIL, with no other text." in prompt
    assert prompt.endswith(
        "Task: Reply to an angry customer.\nResponse: Sorry, refund sent.\nVerdict:"
    )


async def test_hung_judge_times_out() -> None:
    class Hung:
        async def complete(
            self, model: str, messages: list[dict[str, str]], temperature: float
        ) -> str:
            await asyncio.Event().wait()
            return "PASS"

    judge = Judge(Hung(), JudgeConfig(timeout_s=0.01, retries=1))
    result = await build_check(CRITERION).arun(Sample.from_answer("x"), ITEM, CheckContext(), judge)
    assert (result.passed, result.reason_code) == (None, "judge_timeout")


async def test_concurrency_limit() -> None:
    gate = asyncio.Event()
    state = {"now": 0, "most": 0}

    class Slow:
        async def complete(
            self, model: str, messages: list[dict[str, str]], temperature: float
        ) -> str:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
            await gate.wait()
            state["now"] -= 1
            return "PASS"

    judge = Judge(Slow(), JudgeConfig(max_concurrency=2))
    check = build_check(CRITERION)
    runs = [
        asyncio.create_task(check.arun(Sample.from_answer("x"), ITEM, CheckContext(), judge))
        for _ in range(5)
    ]
    for _ in range(50):
        await asyncio.sleep(0)
    assert state["now"] == 2
    gate.set()
    results = await asyncio.gather(*runs)
    assert state["most"] == 2
    assert all(r.passed for r in results)


LABELS = {
    "type": "label_model",
    "name": "tone",
    "model": "gemini-1.5-pro-002",
    "input": [
        {"role": "system", "content": "Classify the tone."},
        {
            "role": "user",
            "content": {"type": "input_text", "text": "Reply: {{sample.output_text}}"},
        },
    ],
    "labels": ["empathetic", "neutral", "hostile"],
    "passing_labels": ["empathetic", "neutral"],
}
SCORE = {
    "type": "score_model",
    "name": "helpful",
    "model": "gpt-4o-2024-08-06",
    "input": [{"role": "user", "content": "Q: {{item.prompt}} A: {{sample.output_text}}"}],
    "range": [0, 10],
    "pass_threshold": 7,
    "sampling_params": {"temperature": 0, "seed": 1},
}


@pytest.mark.parametrize(
    ("definition", "reply", "passed", "score", "code"),
    [
        pytest.param(LABELS, "empathetic", True, None, "judge_pass", id="label_passing"),
        pytest.param(LABELS, "neutral\n", True, None, "judge_pass", id="label_other_passing"),
        pytest.param(LABELS, "hostile", False, None, "judge_fail", id="label_failing"),
        pytest.param(LABELS, "Empathetic", None, None, "judge_parse_error", id="label_case"),
        pytest.param(LABELS, "angry", None, None, "judge_parse_error", id="label_unknown"),
        pytest.param(SCORE, "8", True, 8.0, "judge_score", id="score_above"),
        pytest.param(SCORE, " 7.0 ", True, 7.0, "judge_score", id="score_at_threshold"),
        pytest.param(SCORE, "6.5", False, 6.5, "judge_score", id="score_below"),
        pytest.param(SCORE, "11", None, None, "judge_parse_error", id="score_out_of_range"),
        pytest.param(SCORE, "eight", None, None, "judge_parse_error", id="score_not_number"),
        pytest.param(SCORE, "nan", None, None, "judge_parse_error", id="score_nan"),
    ],
)
async def test_openai_shapes(
    definition: dict[str, Any], reply: str, passed: bool | None, score: float | None, code: str
) -> None:
    result, fake = await grade(definition, reply, answer="So sorry!")
    assert (result.passed, result.score, result.reason_code) == (passed, score, code)
    contract, *rendered = fake.requests[0][1]
    assert contract["role"] == "system"
    assert rendered[-1]["content"].endswith("So sorry!")


def test_score_model_threshold_defaults_to_top_of_range() -> None:
    check = build_check({k: v for k, v in SCORE.items() if k != "pass_threshold"})
    assert getattr(check, "threshold", None) == 10.0


@pytest.mark.parametrize(
    ("model", "pinned"),
    [
        pytest.param("gpt-4o-2024-08-06", True, id="openai_dated"),
        pytest.param("gpt-3.5-turbo-0125", True, id="openai_mmdd_snapshot"),
        pytest.param("claude-3-5-sonnet-20241022", True, id="anthropic_dated"),
        pytest.param("anthropic.claude-3-5-sonnet-20241022-v2:0", True, id="bedrock_version"),
        pytest.param("gemini-1.5-pro-002", True, id="gemini_revision"),
        pytest.param("mistral-large-2411", True, id="mistral_yymm"),
        pytest.param("meta-llama/Llama-3.1-8B-Instruct@0e9e39f", True, id="hf_commit"),
        pytest.param("latest", False, id="bare_latest"),
        pytest.param("gpt-4o-latest", False, id="dash_latest"),
        pytest.param("chatgpt-4o-latest", False, id="chatgpt_latest"),
        pytest.param("llama3:latest", False, id="ollama_latest"),
        pytest.param("mistral-large-latest", False, id="mistral_latest"),
        pytest.param("gpt-4o", False, id="family_alias"),
        pytest.param("claude-sonnet-4-5", False, id="anthropic_alias"),
        pytest.param("gemini-1.5-pro", False, id="gemini_alias"),
        pytest.param("meta-llama/Llama-3.1-8B-Instruct", False, id="hf_repo_without_revision"),
        pytest.param("  ", False, id="blank"),
    ],
)
def test_pinned_models(model: str, pinned: bool) -> None:
    assert (pinned_problem(model) is None) is pinned


@pytest.mark.parametrize(
    ("model", "family"),
    [
        pytest.param("gpt-4o-2024-08-06", "gpt", id="gpt"),
        pytest.param("openai/gpt-4.1-mini", "gpt", id="provider_prefix"),
        pytest.param("o3-mini-2025-01-31", "gpt", id="o_series"),
        pytest.param("claude-3-5-haiku-20241022", "claude", id="claude"),
        pytest.param("us.anthropic.claude-3-5-sonnet-20241022-v2:0", "claude", id="bedrock"),
        pytest.param("meta-llama/Llama-3.1-8B-Instruct", "llama", id="llama_hf"),
        pytest.param("Qwen/Qwen2.5-7B-Instruct", "qwen", id="qwen"),
        pytest.param("mixtral-8x7b-instruct", "mistral", id="mixtral"),
        pytest.param("models/gemini-1.5-pro-002", "gemini", id="gemini"),
        pytest.param("my-finetune", None, id="unknown"),
        pytest.param(None, None, id="none"),
    ],
)
def test_model_family(model: str | None, family: str | None) -> None:
    assert model_family(model) == family


@pytest.mark.parametrize(
    ("graded_model", "warned"),
    [
        pytest.param("claude-3-7-sonnet-20250219", True, id="same_family"),
        pytest.param("gpt-4o-mini-2024-07-18", False, id="other_family"),
        pytest.param(None, False, id="graded_model_unknown"),
    ],
)
async def test_same_family_warning(graded_model: str | None, warned: bool) -> None:
    task = parse_task({"id": "j", "prompt": "Reply.", "checks": [CRITERION]})
    outcome = await grade_async(
        task, "Sorry!", context=CheckContext(model=graded_model), judge=FakeJudge("PASS")
    )
    (result,) = outcome.checks
    assert result.passed is True
    assert (result.warning is not None) is warned
    assert len(outcome.warnings) == (1 if warned else 0)


async def test_without_a_judge_the_check_is_unavailable() -> None:
    task = parse_task({"id": "j", "prompt": "Reply.", "checks": [CRITERION]})
    for outcome in (grader.grade(task, "Sorry!"), await grade_async(task, "Sorry!")):
        assert (outcome.passed, outcome.checks[0].reason_code) == (None, "judge_unavailable")


async def test_criterion_without_model_uses_config_or_is_unavailable() -> None:
    check = build_check({k: v for k, v in CRITERION.items() if k != "model"})
    sample = Sample.from_answer("x")
    bare = await check.arun(sample, ITEM, CheckContext(), Judge(FakeJudge("PASS")))
    assert bare.reason_code == "judge_unavailable"
    fake = FakeJudge("PASS")
    configured = Judge(fake, JudgeConfig(model="qwen3-235b-a22b-2507"))
    assert (await check.arun(sample, ITEM, CheckContext(), configured)).passed is True
    assert fake.requests[0][0] == "qwen3-235b-a22b-2507"


async def test_missing_task_prompt_is_ungraded() -> None:
    result = await build_check(CRITERION).arun(
        Sample.from_answer("x"), {}, CheckContext(), Judge(FakeJudge("PASS"))
    )
    assert (result.passed, result.reason_code) == (None, "template_unresolved")


@pytest.mark.parametrize(
    ("definition", "message"),
    [
        pytest.param({**CRITERION, "model": "gpt-4o"}, "not pinned", id="unpinned"),
        pytest.param({**CRITERION, "model": "gpt-4o-latest"}, "'latest' alias", id="latest"),
        pytest.param({**CRITERION, "pass_examples": []}, "few-shot is mandatory", id="no_pass"),
        pytest.param({**CRITERION, "fail_examples": [""]}, "few-shot", id="empty_example"),
        pytest.param({**CRITERION, "criterion": " "}, "must not be empty", id="blank_criterion"),
        pytest.param(
            {**CRITERION, "response": "{{item.prompt}}"},
            "never reads the answer",
            id="response_not_from_sample",
        ),
        pytest.param({**LABELS, "labels": ["only"]}, "two or more", id="one_label"),
        pytest.param({**LABELS, "passing_labels": ["great"]}, "subset", id="passing_not_label"),
        pytest.param({**LABELS, "model": None}, "pinned model id", id="openai_form_needs_model"),
        pytest.param(
            {**LABELS, "input": [{"role": "user", "content": "{{item.prompt}}"}]},
            "never reads the answer",
            id="input_never_reads_answer",
        ),
        pytest.param(
            {**LABELS, "input": [{"role": "robot", "content": "x"}]},
            "must be \\{role",
            id="bad_role",
        ),
        pytest.param(
            {**SCORE, "sampling_params": {"temperature": 0.7}},
            "temperature must be 0",
            id="temperature",
        ),
        pytest.param({**SCORE, "range": [10, 0]}, "low < high", id="range_reversed"),
        pytest.param({**SCORE, "pass_threshold": 11}, "inside 'range'", id="threshold_outside"),
    ],
)
def test_refused_definitions(definition: dict[str, Any], message: str) -> None:
    with pytest.raises(CheckDefinitionError, match=message):
        build_check(definition)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        pytest.param({"model": "gpt-4o"}, "not pinned", id="unpinned_default_model"),
        pytest.param({"timeout_s": 0}, "timeout_s > 0", id="zero_timeout"),
        pytest.param({"max_concurrency": 0}, "max_concurrency >= 1", id="no_concurrency"),
        pytest.param({"api_key": "sk-..."}, "unknown key 'api_key'", id="secret_inline_refused"),
    ],
)
def test_judge_config_refused(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        JudgeConfig.from_mapping(raw)
