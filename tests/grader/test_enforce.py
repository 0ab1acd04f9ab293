"""Enforce entries and route policies (grader/enforce.py, grader/route_policy.py): what may
enforce, and every refusal naming the task or route and the check."""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grader.checks import CheckContext, Sample
from grader.checks.policy import PolicyCheck
from grader.enforce import EnforceError, Target
from grader.loader import parse_task
from grader.patterns import glob_match
from grader.route_policy import load_policies, parse_policies
from grader.tasks import TaskLoadError
from tests.support.paths import REPO

EXPECTED = {"name": "get_weather", "arguments": {"city": "Paris", "scale": "c"}}
STALE = {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}
POLICY = {
    "type": "policy",
    "name": "refunds",
    "allowed_actions": {"get_weather": {}},
    "forbidden_calls": ["delete_*"],
    "required_links": [{"from": "get_weather.arguments.city", "to": "item.city"}],
}
LINKS_ONLY = {
    "type": "policy",
    "name": "links",
    "required_links": [{"from": "get_weather.arguments.city", "to": "item.city"}],
}
SCHEMA = {"type": "json_schema", "name": "request_schema", "schema": "from_request"}
LITERAL = {"type": "json_schema", "name": "literal", "schema": {"type": "object"}}
JUDGE = {
    "type": "label_model",
    "name": "tone",
    "model": "gpt-4o-2024-08-06",
    "input": [{"role": "user", "content": "{{sample.output_text}}"}],
    "labels": ["ok", "bad"],
    "passing_labels": ["ok"],
}
# seed 001's worked episode record (config/tasks/episodes.jsonl): its allowed_actions
EPISODE = next(
    record
    for line in (REPO / "config" / "tasks" / "episodes.jsonl").read_text().splitlines()
    if "allowed_actions" in (record := json.loads(line).get("episode") or {})
)


def task(enforce: Any, *, stale: bool = True, episode: bool = False) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "id": "t1",
        "expected": EXPECTED,
        "checks": [
            {"type": "tool_call", "name": "call"},
            POLICY,
            LINKS_ONLY,
            SCHEMA,
            LITERAL,
            JUDGE,
        ],
        "enforce": enforce,
    }
    if stale:
        raw["metadata"] = {"stale": STALE}
    if episode:
        raw["episode"] = EPISODE
    return raw


@pytest.mark.parametrize(
    ("checks", "targets"),
    [
        (["call"], [Target("stale", "call", "call")]),
        (["refunds"],
         [Target("policy", "refunds", "refunds", ("authority_ok", "no_forbidden_call"))]),
        (
            ["refunds.no_forbidden_call"],
            [Target("policy", "refunds.no_forbidden_call", "refunds", ("no_forbidden_call",))],
        ),
        (["request_schema"], [Target("request_schema", "request_schema", "request_schema")]),
    ],
)  # fmt: skip
def test_deterministic_checks_resolve_to_their_targets(
    checks: list[str], targets: list[Target]
) -> None:
    parsed = parse_task(task({"mode": "block", "checks": checks}))
    assert parsed.enforce is not None
    assert list(parsed.enforce.targets) == targets
    assert parsed.enforce.active


def test_episode_authority_resolves_when_the_record_has_allowed_actions() -> None:
    raw = task({"mode": "observe", "checks": ["episode.authority_ok"]}, episode=True)
    parsed = parse_task(raw)
    assert parsed.enforce is not None
    assert parsed.enforce.targets == (Target("episode_authority", "episode.authority_ok"),)


def test_mode_off_is_inactive_and_defaults_hold() -> None:
    parsed = parse_task(task({"checks": ["call"]}))
    assert parsed.enforce is not None
    assert (parsed.enforce.mode, parsed.enforce.budget_ms, parsed.enforce.fail_closed) == (
        "off",
        20,
        False,
    )
    assert not parsed.enforce.active


@pytest.mark.parametrize(
    ("enforce", "kw", "message"),
    [
        ({"mode": "block", "checks": ["tone"]}, {},
         "task 't1': enforce.checks[0]: check 'tone' is a judge check (label_model): a judge"),
        ({"mode": "block", "checks": ["call", "refunds.links_ok"]}, {},
         "task 't1': enforce.checks[1]: column 'refunds.links_ok' cannot enforce"),
        ({"mode": "block", "checks": ["links"]}, {},
         "task 't1': enforce.checks[0]: check 'links' (policy) has neither 'allowed_actions' nor"),
        ({"mode": "block", "checks": ["literal"]}, {},
         "task 't1': enforce.checks[0]: check 'literal' (json_schema) may enforce only with"),
        ({"mode": "block", "checks": ["call"]}, {"stale": False},
         "task 't1': enforce.checks[0]: check 'call' (tool_call) enforces only its stale-schema"),
        ({"mode": "block", "checks": ["episode.authority_ok"]}, {},
         "task 't1': enforce.checks[0]: check 'episode.authority_ok' needs the task's 'episode'"),
        ({"mode": "block", "checks": ["nope"]}, {},
         "task 't1': enforce.checks[0]: check 'nope' is not a check of this task"),
        ({"mode": "deny", "checks": ["call"]}, {},
         "task 't1': 'enforce.mode' must be one of off, observe, block, strip"),
        ({"mode": "block", "checks": []}, {}, "task 't1': 'enforce.checks' must be a non-empty"),
        ({"mode": "block", "checks": ["call", "call"]}, {}, "names a check twice"),
        ({"mode": "block", "checks": ["call"], "budget_ms": 0}, {}, "'enforce.budget_ms' must be"),
        ({"mode": "block", "checks": ["call"], "budget_ms": True}, {}, "'enforce.budget_ms' must"),
        ({"mode": "block", "checks": ["call"], "fail_closed": "yes"}, {},
         "'enforce.fail_closed' must be true or false"),
        ({"mode": "block", "checks": ["call"], "shadow": True}, {},
         "task 't1': 'enforce.shadow' is unknown (known: mode, checks, budget_ms, fail_closed)"),
        ("block", {}, "task 't1': 'enforce' must be an object"),
    ],
)  # fmt: skip
def test_an_entry_that_cannot_enforce_is_refused_naming_task_and_check(
    enforce: Any, kw: dict[str, Any], message: str
) -> None:
    with pytest.raises(TaskLoadError) as refused:
        parse_task(task(enforce, **kw), "tasks.jsonl:3")
    assert str(refused.value).startswith("tasks.jsonl:3: ")
    assert message in str(refused.value)


def policies(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"policies": list(entries)}


NO_DELETE = {"type": "policy", "name": "no_delete", "forbidden_calls": ["delete_*"]}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (policies({"name": "p", "checks": [JUDGE], "enforce": {"mode": "block"}}),
         "route policy 'p': enforce.checks[0]: check 'tone' is a judge check"),
        (policies({"name": "p", "checks": [{"type": "tool_call", "name": "c"}],
                   "enforce": {"mode": "block"}}),
         "route policy 'p': checks[0]: a tool_call check grades against a task's expected call"),
        (policies({"name": "p", "checks": [NO_DELETE], "enforce": {"mode": "block",
                                                                  "checks": ["other"]}}),
         "route policy 'p': enforce.checks[0]: check 'other' is not a check of this task"),
        (policies({"name": "p", "checks": [NO_DELETE]}), "route policy 'p': 'enforce' must be"),
        (policies({"name": "p", "checks": [NO_DELETE], "enforce": {"mode": "block"},
                   "apis": ["embeddings"]}),
         "route policy 'p': 'apis' entry 'embeddings' is not one of"),
        (policies({"name": "p", "checks": [NO_DELETE], "enforce": {"mode": "block"},
                   "route": "x"}), "route policy 'p': unknown key 'route'"),
        (policies({"checks": [NO_DELETE]}), "policies[0]: 'name' must be a non-empty string"),
        (policies({"name": "p", "checks": [NO_DELETE], "enforce": {"mode": "block"}},
                  {"name": "p", "checks": [NO_DELETE], "enforce": {"mode": "block"}}),
         "two policies are named 'p'"),
        ({"rules": []}, "a policy file is a mapping with one key, 'policies'"),
    ],
)  # fmt: skip
def test_a_route_policy_that_cannot_enforce_is_refused_naming_route_and_check(
    raw: dict[str, Any], message: str
) -> None:
    with pytest.raises(EnforceError) as refused:
        parse_policies(raw, "policy.yaml")
    assert str(refused.value).startswith("policy.yaml: ")
    assert message in str(refused.value)


def test_route_policies_match_by_model_glob_and_api(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(
        "policies:\n"
        "  - name: minis\n    models: ['gpt-4.1-mini*']\n    apis: [responses]\n"
        "    checks: [{type: policy, name: no_delete, forbidden_calls: ['delete_*']}]\n"
        "    enforce: {mode: strip}\n"
        "  - name: all\n    checks: [{type: json_schema, name: s, schema: from_request}]\n"
        "    enforce: {mode: observe}\n"
        "  - name: dormant\n    checks: [{type: json_schema, name: s, schema: from_request}]\n"
        "    enforce: {mode: 'off'}\n"
    )
    loaded = load_policies(path)
    names = [[p.name for p in loaded.matching(api, model)] for api, model in [
        ("responses", "gpt-4.1-mini-2025-04-14"), ("chat_completions", "gpt-4.1-mini"),
        ("responses", "gpt-4o"), ("responses", None)]]  # fmt: skip
    assert names == [["minis", "all"], ["all"], ["all"], ["all"]]
    assert loaded.policies[0].label == "route:minis"
    assert loaded.reads_model  # "minis" is limited to some models
    everywhere = parse_policies({"policies": [{"name": "all", "checks": [NO_DELETE],
                                               "enforce": {"mode": "block"}}]})  # fmt: skip
    assert not everywhere.reads_model  # no request's model needs reading


def test_a_policy_file_that_is_not_yaml_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("policies: [\n")
    with pytest.raises(EnforceError, match=r"policy.yaml: not valid YAML"):
        load_policies(path)


@pytest.mark.parametrize(
    ("forbidden", "name", "fires"),
    [
        (["delete_*"], "delete_payment", True),
        (["delete_*"], "undelete_payment", False),
        (["*_payment"], "refund_payment", True),
        (["get_?ime"], "get_time", True),
        (["get_?ime"], "get_tiime", False),
        (["delete_payment"], "delete_payment", True),
        (["delete_payment"], "delete_payments", False),
        (["[ab]"], "a", False),  # no character classes: '[' is itself
    ],
)
def test_forbidden_call_names_take_globs(forbidden: list[str], name: str, fires: bool) -> None:
    check = PolicyCheck.build(
        {"type": "policy", "name": "p", "forbidden_calls": forbidden}, "checks[0]"
    )
    tool = {"type": "function", "function": {"name": name, "arguments": "{}"}}
    result = check.run(Sample("", None, [tool]), {}, CheckContext())
    assert result.passed is (not fires)
    if fires:
        assert result.reason_code == "forbidden_call"


_NAMES = st.text(alphabet="ab_*?", max_size=8)


@given(pattern=_NAMES, name=st.text(alphabet="ab_", max_size=10))
def test_glob_match_agrees_with_fnmatch_without_character_classes(pattern: str, name: str) -> None:
    assert glob_match(pattern, name) == fnmatch.fnmatchcase(name, pattern)


def test_glob_match_stays_linear_on_a_pathological_pattern() -> None:
    # the pattern that makes a backtracking matcher exponential; here a single pass
    assert not glob_match("*a" * 40 + "b", "a" * 64)
