"""``/grading/v1/graders/run`` and ``/validate``: OpenAI's fine-tuning grader endpoint shapes.

Two layers. A scripted stand-in for ``grader.checks`` (the contract in docs/checks-contract.md)
pins the endpoint's own logic: reward rule, error flags, sub-rewards, request errors. Then the
real checks run seed 003's string_check truth table end to end (skipped only while this build
has no ``grader.checks.build_check``). Every success body is parsed with openai-python's own
``GraderRunResponse`` / ``GraderValidateResponse`` models.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any

import openai
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from openai import AsyncOpenAI
from openai.types.fine_tuning.alpha import GraderRunResponse, GraderValidateResponse
from pytest_aiohttp import AiohttpClient

from grader.json import dumps, loads_exact
from proxy.surfaces import scoring_http as scoring_api
from proxy.surfaces.scoring_http import ERROR_DETAILS, ERROR_FLAGS, PREFIX, add_scoring_routes
from tests.support.tasks import POLITE_JUDGE

Client = TestClient[web.Request, web.Application]
RUN, VALIDATE = f"{PREFIX}/graders/run", f"{PREFIX}/graders/validate"

# Seed 003's grader and request shapes.
ROUTE_GRADER = {
    "type": "string_check",
    "name": "support_route_exact_v1",
    "operation": "eq",
    "input": "{{sample.output_text}}",
    "reference": "{{item.expected_route}}",
}


@pytest.fixture
async def client(aiohttp_client: AiohttpClient) -> Client:
    app = web.Application()
    add_scoring_routes(app, max_batch=8)
    return await aiohttp_client(app)


async def post(client: Client, path: str, body: Any) -> tuple[int, Any]:
    raw = body if isinstance(body, bytes) else dumps(body)
    response = await client.post(path, data=raw, headers={"Content-Type": "application/json"})
    return response.status, loads_exact(await response.text())


# --- a scripted grader.checks -------------------------------------------------------------


@dataclass(frozen=True)
class FakeSample:
    answer: str

    @classmethod
    def from_answer(cls, answer_text: str) -> FakeSample:
        return cls(answer_text)


@dataclass(frozen=True)
class FakeContext:
    request_tools: list[dict[str, Any]] | None = None


@dataclass(frozen=True)
class FakeResult:
    name: str
    type: str
    passed: bool | None
    score: float | None
    reason: str
    reason_code: str
    error: str | None
    digest: str
    parts: tuple[FakeResult, ...] = ()


@dataclass
class FakeCheck:
    """Answers what its definition's ``script`` says and remembers what it was run on."""

    definition: dict[str, Any]
    runs: list[tuple[Any, Any, Any]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return str(self.definition["name"])

    @property
    def type(self) -> str:
        return str(self.definition["type"])

    @property
    def digest(self) -> str:
        return "sha256:fake"

    @property
    def needs_judge(self) -> bool:
        return self.type == "score_model"

    def run(self, sample: Any, item: Any, context: Any) -> FakeResult:
        self.runs.append((sample, item, context))
        script = self.definition.get("script", {})
        if "raise_" in script:
            raise RuntimeError(script["raise_"])
        parts = tuple(
            FakeResult(name, "string_check", passed, None, "", "x", None, "d")
            for name, passed in script.get("parts", {}).items()
        )
        return FakeResult(
            self.name,
            self.type,
            script.get("passed", True),
            script.get("score"),
            script.get("reason", "scripted"),
            script.get("reason_code", "string_match"),
            script.get("error"),
            self.digest,
            parts,
        )


class FakeDefinitionError(ValueError):
    pass


@pytest.fixture
def built() -> list[FakeCheck]:
    return []


@pytest.fixture
def fake_checks(monkeypatch: pytest.MonkeyPatch, built: list[FakeCheck]) -> None:
    module = types.ModuleType("fake_checks")

    def build_check(definition: dict[str, Any], where: str = "") -> FakeCheck:
        if definition.get("type") not in ("string_check", "scripted", "score_model"):
            raise FakeDefinitionError(f"{where}: check 'x': 'type' is not a grader type")
        check = FakeCheck(definition)
        built.append(check)
        return check

    module.build_check = build_check  # type: ignore[attr-defined]
    module.CheckDefinitionError = FakeDefinitionError  # type: ignore[attr-defined]
    module.Sample = FakeSample  # type: ignore[attr-defined]
    module.CheckContext = FakeContext  # type: ignore[attr-defined]
    module.CheckResult = FakeResult  # type: ignore[attr-defined]
    monkeypatch.setattr(scoring_api, "grader_checks", module)


def scripted(**script: Any) -> dict[str, Any]:
    return {"type": "scripted", "name": "g1", "script": script}


@pytest.mark.usefixtures("fake_checks")
@pytest.mark.parametrize(
    ("script", "reward", "flag"),
    [
        pytest.param({"passed": True}, 1.0, None, id="pass_rewards_1"),
        pytest.param({"passed": False}, 0.0, None, id="fail_rewards_0"),
        pytest.param({"passed": True, "score": 0.73}, 0.73, None, id="score_is_the_reward"),
        pytest.param({"passed": False, "score": 0.2}, 0.2, None, id="score_below_threshold"),
        pytest.param(
            {"passed": None, "reason_code": "template_unresolved", "error": "item.x missing"},
            0.0,
            "invalid_variable_error",
            id="unresolved_template_is_invalid_variable",
        ),
        pytest.param(
            {"passed": None, "reason_code": "formula_error"},
            0.0,
            "formula_parse_error",
            id="formula_error",
        ),
        pytest.param(
            {"passed": None, "reason_code": "check_error"}, 0.0, "other_error", id="other_error"
        ),
    ],
)
async def test_run_reward_and_error_flags(
    client: Client, script: dict[str, Any], reward: float, flag: str | None
) -> None:
    """reward = score, else 1/0 by pass; an infrastructure error sets exactly one flag."""
    status, body = await post(client, RUN, {"grader": scripted(**script), "model_sample": "x"})
    assert status == 200
    assert body["reward"] == reward
    errors = body["metadata"]["errors"]
    assert {k for k in ERROR_FLAGS if errors[k]} == ({flag} if flag else set())
    assert body["gradeproxy"]["passed"] == script["passed"]
    GraderRunResponse.model_validate(body)


@pytest.mark.usefixtures("fake_checks")
async def test_a_check_that_raises_is_an_infrastructure_error_not_a_500(client: Client) -> None:
    status, body = await post(client, RUN, {"grader": scripted(raise_="boom"), "model_sample": "x"})
    assert status == 200
    assert (body["reward"], body["metadata"]["errors"]["other_error"]) == (0.0, True)
    assert body["gradeproxy"]["reason_code"] == "check_error"
    assert body["gradeproxy"]["error"] == "RuntimeError('boom')"


@pytest.mark.usefixtures("fake_checks")
async def test_run_response_has_openais_shape(client: Client) -> None:
    status, body = await post(client, RUN, {"grader": scripted(passed=True), "model_sample": "x"})
    assert status == 200
    assert set(body) == {
        "reward",
        "metadata",
        "sub_rewards",
        "model_grader_token_usage_per_model",
        "gradeproxy",
    }
    metadata = body["metadata"]
    assert set(metadata) == {
        "name",
        "type",
        "errors",
        "execution_time",
        "scores",
        "token_usage",
        "sampled_model_name",
    }
    assert (metadata["name"], metadata["type"], metadata["scores"]) == (
        "g1",
        "scripted",
        {"g1": 1.0},
    )
    assert set(metadata["errors"]) == set(ERROR_FLAGS) | set(ERROR_DETAILS)
    assert isinstance(metadata["execution_time"], float)
    assert metadata["execution_time"] >= 0
    assert (metadata["token_usage"], metadata["sampled_model_name"]) == (None, None)
    assert (body["sub_rewards"], body["model_grader_token_usage_per_model"]) == ({}, {})
    parsed = GraderRunResponse.model_validate(body)
    assert (parsed.reward, parsed.metadata.name) == (1.0, "g1")


@pytest.mark.usefixtures("fake_checks")
async def test_run_reports_each_part_as_a_sub_reward(client: Client) -> None:
    grader = scripted(passed=False, parts={"no_delete": True, "role_ok": False})
    status, body = await post(client, RUN, {"grader": grader, "model_sample": "x"})
    assert status == 200
    assert body["sub_rewards"] == {"no_delete": 1.0, "role_ok": 0.0}


@pytest.mark.usefixtures("fake_checks")
@pytest.mark.parametrize(
    ("item", "seen"),
    [
        pytest.param({"expected_route": "BILLING"}, {"expected_route": "BILLING"}, id="item_given"),
        pytest.param(None, {}, id="item_null_is_empty"),
        pytest.param(..., {}, id="item_absent_is_empty"),
    ],
)
async def test_run_hands_the_check_the_sample_and_item(
    client: Client, built: list[FakeCheck], item: Any, seen: dict[str, Any]
) -> None:
    body: dict[str, Any] = {"grader": scripted(passed=True), "model_sample": "BILLING\n"}
    if item is not ...:
        body["item"] = item
    status, _ = await post(client, RUN, body)
    assert status == 200
    ((sample, got_item, context),) = built[0].runs
    assert (sample, got_item, context) == (FakeSample("BILLING\n"), seen, FakeContext(None))


async def test_judge_grader_without_a_judge_is_an_error_saying_how_to_configure_one(
    client: Client,
) -> None:
    """No judge on this server: never a fail, an infrastructure error naming the setting."""
    grader = POLITE_JUDGE
    status, body = await post(client, RUN, {"grader": grader, "model_sample": "Thanks!"})
    assert status == 200
    assert body["gradeproxy"]["passed"] is None
    assert body["gradeproxy"]["reason_code"] == "judge_unavailable"
    assert body["metadata"]["errors"]["model_grader_server_error"] is True
    assert "judge.endpoint" in body["metadata"]["errors"]["model_grader_server_error_details"]
    GraderRunResponse.model_validate(body)


@pytest.mark.usefixtures("fake_checks")
@pytest.mark.parametrize("path", [RUN, VALIDATE], ids=["run", "validate"])
async def test_unknown_grader_type_is_a_400_naming_the_grader(client: Client, path: str) -> None:
    body = {"grader": {"type": "python", "name": "p", "source": "..."}, "model_sample": "x"}
    status, error = await post(client, path, body)
    assert status == 400
    assert (error["error"]["code"], error["error"]["param"]) == ("invalid_grader", "grader")
    assert error["error"]["message"] == "grader: check 'x': 'type' is not a grader type"


@pytest.mark.usefixtures("fake_checks")
async def test_validate_echoes_the_grader(client: Client) -> None:
    status, body = await post(client, VALIDATE, {"grader": ROUTE_GRADER})
    assert (status, body) == (200, {"grader": ROUTE_GRADER})
    parsed = GraderValidateResponse.model_validate(body)
    assert parsed.grader is not None
    assert parsed.grader.type == "string_check"


@pytest.mark.parametrize(
    ("path", "body", "code", "param"),
    [
        pytest.param(RUN, b"{", "invalid_json", None, id="run_malformed_json"),
        pytest.param(
            RUN, {"model_sample": "x"}, "missing_required_parameter", "grader", id="run_no_grader"
        ),
        pytest.param(
            RUN, {"grader": "eq", "model_sample": "x"}, "invalid_type", "grader", id="grader_string"
        ),
        pytest.param(
            RUN,
            {"grader": ROUTE_GRADER},
            "missing_required_parameter",
            "model_sample",
            id="no_sample",
        ),
        pytest.param(
            RUN,
            {"grader": ROUTE_GRADER, "model_sample": {"text": "x"}},
            "invalid_type",
            "model_sample",
            id="sample_object",
        ),
        pytest.param(
            RUN,
            {"grader": ROUTE_GRADER, "model_sample": "x", "item": ["BILLING"]},
            "invalid_type",
            "item",
            id="item_array",
        ),
        pytest.param(VALIDATE, {}, "missing_required_parameter", "grader", id="validate_no_grader"),
        pytest.param(VALIDATE, [ROUTE_GRADER], "invalid_type", None, id="validate_body_array"),
    ],
)
async def test_request_errors_name_the_field(
    client: Client, path: str, body: Any, code: str, param: str | None
) -> None:
    status, error = await post(client, path, body)
    assert status == 400
    assert error["error"]["type"] == "invalid_request_error"
    assert (error["error"]["code"], error["error"]["param"]) == (code, param)


# --- the real checks -------------------------------------------------------------------------


@pytest.fixture
def real_checks() -> None:
    """The endpoint runs the real check implementations (grader.checks), not stand-ins."""
    from grader import checks

    assert callable(checks.build_check)


SEED_003_ROUTES = [
    ("BILLING", "BILLING", 1.0),
    ("billing", "BILLING", 0.0),
    ("BILLING\n", "BILLING", 0.0),
    ("Route to BILLING", "BILLING", 0.0),
    ("CANCEL", "BILLING", 0.0),
]


@pytest.mark.usefixtures("real_checks")
@pytest.mark.parametrize(
    ("sample", "route", "reward"),
    SEED_003_ROUTES,
    ids=["exact_token", "wrong_case", "trailing_newline", "prose", "other_label"],
)
async def test_seed_003_string_check_truth_table(
    client: Client, sample: str, route: str, reward: float
) -> None:
    body = {"grader": ROUTE_GRADER, "model_sample": sample, "item": {"expected_route": route}}
    status, result = await post(client, RUN, body)
    assert status == 200, result
    assert result["reward"] == reward
    assert not any(result["metadata"]["errors"][flag] for flag in ERROR_FLAGS)
    GraderRunResponse.model_validate(result)


@pytest.mark.usefixtures("real_checks")
async def test_missing_item_field_is_an_infrastructure_error_not_a_fail(client: Client) -> None:
    """Seed 003: a missing dataset field is a template problem, never a model-quality zero."""
    body = {"grader": ROUTE_GRADER, "model_sample": "BILLING", "item": {}}
    status, result = await post(client, RUN, body)
    assert status == 200, result
    assert result["gradeproxy"]["passed"] is None
    assert result["metadata"]["errors"]["invalid_variable_error"] is True


@pytest.mark.usefixtures("real_checks")
@pytest.mark.parametrize(
    "grader",
    [
        pytest.param({**ROUTE_GRADER, "operation": "neq"}, id="neq_is_not_an_operation"),
        pytest.param(
            {k: v for k, v in ROUTE_GRADER.items() if k != "reference"}, id="no_reference"
        ),
        pytest.param({**ROUTE_GRADER, "type": "no_such_grader"}, id="unknown_type"),
    ],
)
async def test_validate_rejects_what_the_service_would(client: Client, grader: Any) -> None:
    status, error = await post(client, VALIDATE, {"grader": grader})
    assert status == 400, error
    assert (error["error"]["code"], error["error"]["param"]) == ("invalid_grader", "grader")


@pytest.mark.usefixtures("real_checks")
async def test_validate_accepts_seed_003s_grader(client: Client) -> None:
    status, body = await post(client, VALIDATE, {"grader": ROUTE_GRADER})
    assert (status, body) == (200, {"grader": ROUTE_GRADER})


@pytest.mark.e2e
@pytest.mark.usefixtures("real_checks")
async def test_the_official_openai_sdk_runs_and_validates_graders_here(client: Client) -> None:
    """base_url=.../grading/v1: the SDK's own paths, request bodies and response models."""
    sdk = AsyncOpenAI(base_url=str(client.make_url(PREFIX)), api_key="unused", max_retries=0)
    async with sdk:
        graders = sdk.fine_tuning.alpha.graders
        passed = await graders.run(
            grader=ROUTE_GRADER,  # type: ignore[arg-type]
            model_sample="BILLING",
            item={"expected_route": "BILLING"},
        )
        failed = await graders.run(
            grader=ROUTE_GRADER,  # type: ignore[arg-type]
            model_sample="billing",
            item={"expected_route": "BILLING"},
        )
        valid = await graders.validate(grader=ROUTE_GRADER)  # type: ignore[arg-type]
        with pytest.raises(openai.BadRequestError) as info:
            await graders.validate(grader={**ROUTE_GRADER, "operation": "neq"})  # type: ignore[arg-type]
    assert (passed.reward, failed.reward) == (1.0, 0.0)
    assert passed.metadata.name == "support_route_exact_v1"
    assert passed.metadata.errors.invalid_variable_error is False
    assert valid.grader is not None
    assert valid.grader.type == "string_check"
    assert (info.value.code, info.value.param) == ("invalid_grader", "grader")
