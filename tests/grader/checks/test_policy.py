"""policy: one column per behaviour — authority, forbidden calls, links (seed 001)."""

from __future__ import annotations

from typing import Any

import pytest

from grader.checks import CheckContext, CheckDefinitionError, build_check
from tests.support.checks import call, run, wire

PID = "pay_123"
POLICY = {
    "type": "policy",
    "name": "refunds",
    "allowed_actions": {
        "create_refund": {
            "roles": ["support_lead", "finance"],
            "arguments": {
                "payment_id": {"pattern": "^pay_", "required": True},
                "currency": {"enum": ["EUR", "USD"]},
                "mode": {"const": "standard"},
                "meta.channel": {"enum": ["email"]},
            },
        },
        "get_payment": {},
        "notify": {},
    },
    "forbidden_calls": ["delete_payment", {"name": "create_refund", "arguments": {"amount": 0}}],
    "required_links": [
        {"from": "create_refund.arguments.payment_id", "to": "item.payment_id"},
        {"from": "notify.arguments.refund_ref", "to": "create_refund.arguments.reference"},
    ],
}
LEAD = {"role": "support_lead", "payment_id": PID}
REFUND = call("create_refund", payment_id=PID, currency="EUR", amount=10, reference="r-1")


def columns(answer: str, item: dict[str, Any] = LEAD) -> dict[str, tuple[bool | None, str]]:
    result = run(POLICY, answer, item)
    return {part.name: (part.passed, part.reason_code) for part in result.parts}


OK = (True, "policy_ok")


@pytest.mark.parametrize(
    ("answer", "item", "authority"),
    [
        pytest.param(wire(REFUND), LEAD, OK, id="allowed_with_role"),
        pytest.param(wire(REFUND), {**LEAD, "role": "finance"}, OK, id="other_allowed_role"),
        pytest.param(
            wire(REFUND),
            {**LEAD, "role": "trainee"},
            (False, "role_not_authorised"),
            id="role_not_allowed",
        ),
        pytest.param(
            wire(REFUND),
            {"payment_id": PID},
            (None, "missing_item_field"),
            id="no_role_is_infra_error",
        ),
        pytest.param(wire(call("get_payment", payment_id=PID)), {}, OK, id="no_roles_needed"),
        pytest.param(
            wire(call("wire_money", to="x")),
            LEAD,
            (False, "unauthorised_action"),
            id="action_not_allowed",
        ),
        pytest.param(
            wire({**REFUND, "arguments": {**REFUND["arguments"], "currency": "JPY"}}),
            LEAD,
            (False, "argument_constraint"),
            id="enum_violated",
        ),
        pytest.param(
            wire({**REFUND, "arguments": {**REFUND["arguments"], "payment_id": "ch_1"}}),
            LEAD,
            (False, "argument_constraint"),
            id="pattern_violated",
        ),
        pytest.param(
            wire({**REFUND, "arguments": {**REFUND["arguments"], "payment_id": 7}}),
            LEAD,
            (False, "argument_constraint"),
            id="pattern_needs_string",
        ),
        pytest.param(
            wire(call("create_refund", currency="EUR")),
            LEAD,
            (False, "argument_constraint"),
            id="required_missing",
        ),
        pytest.param(
            wire({**REFUND, "arguments": {**REFUND["arguments"], "mode": "express"}}),
            LEAD,
            (False, "argument_constraint"),
            id="const_violated",
        ),
        pytest.param(
            wire({**REFUND, "arguments": {**REFUND["arguments"], "meta": {"channel": "sms"}}}),
            LEAD,
            (False, "argument_constraint"),
            id="nested_path_enum",
        ),
        pytest.param("No action needed.", LEAD, OK, id="no_calls_within_authority"),
    ],
)
def test_authority(answer: str, item: dict[str, Any], authority: tuple[bool | None, str]) -> None:
    assert columns(answer, item)["refunds.authority_ok"] == authority


@pytest.mark.parametrize(
    ("answer", "verdict"),
    [
        pytest.param(wire(REFUND), OK, id="refund_is_fine"),
        pytest.param(
            wire(REFUND, call("delete_payment", payment_id=PID)),
            (False, "forbidden_call"),
            id="forbidden_name",
        ),
        pytest.param(
            wire({**REFUND, "arguments": {**REFUND["arguments"], "amount": 0}}),
            (False, "forbidden_call"),
            id="forbidden_arguments",
        ),
        pytest.param(
            wire({**REFUND, "arguments": {**REFUND["arguments"], "amount": 0.0}}),
            (False, "forbidden_call"),
            id="forbidden_compared_canonically",
        ),
        pytest.param(
            '{"tool_calls": [{"function": {"name": "delete_payment", "arguments": "x"}}]}',
            (False, "forbidden_call"),
            id="forbidden_name_even_with_bad_arguments",
        ),
    ],
)
def test_no_forbidden_call(answer: str, verdict: tuple[bool | None, str]) -> None:
    assert columns(answer)["refunds.no_forbidden_call"] == verdict


NOTIFY = call("notify", refund_ref="r-1")


@pytest.mark.parametrize(
    ("answer", "item", "verdict"),
    [
        pytest.param(wire(REFUND, NOTIFY), LEAD, OK, id="both_links_hold"),
        pytest.param(
            wire({**REFUND, "arguments": {**REFUND["arguments"], "payment_id": "pay_9"}}),
            LEAD,
            (False, "link_broken"),
            id="item_link_broken",
        ),
        pytest.param(
            wire(REFUND, call("notify", refund_ref="r-2")),
            LEAD,
            (False, "link_broken"),
            id="call_link_broken",
        ),
        pytest.param(wire(NOTIFY), LEAD, (False, "link_broken"), id="link_target_call_absent"),
        pytest.param(wire(call("notify")), LEAD, (False, "link_broken"), id="source_arg_missing"),
        pytest.param(
            wire(call("get_payment", payment_id=PID)),
            LEAD,
            (False, "link_broken"),
            id="uncalled_source_breaks_the_link_never_vacuous",
        ),
        pytest.param(
            wire(REFUND),
            {"role": "support_lead"},
            (None, "missing_item_field"),
            id="item_field_missing_is_infra_error",
        ),
    ],
)
def test_links(answer: str, item: dict[str, Any], verdict: tuple[bool | None, str]) -> None:
    assert columns(answer, item)["refunds.links_ok"] == verdict


def test_one_column_per_configured_behaviour() -> None:
    check = build_check({"type": "policy", "name": "p", "forbidden_calls": ["rm"]})
    result = run(check, wire(call("rm")))
    assert [p.name for p in result.parts] == ["p.no_forbidden_call"]
    assert getattr(check, "columns", None) == ("p.no_forbidden_call",)
    full = run(POLICY, wire(REFUND, NOTIFY), LEAD)
    assert [p.name for p in full.parts] == [
        "refunds.authority_ok",
        "refunds.no_forbidden_call",
        "refunds.links_ok",
    ]
    assert {p.digest for p in full.parts} == {full.digest}


@pytest.mark.parametrize(
    ("definition", "message"),
    [
        pytest.param({}, "must be given", id="nothing_configured"),
        pytest.param({"allowed_actions": []}, "must map action names", id="actions_list"),
        pytest.param(
            {"allowed_actions": {"f": {"args": {}}}},
            "only 'arguments' and 'roles'",
            id="actions_typo",
        ),
        pytest.param(
            {"allowed_actions": {"f": {"roles": "admin"}}}, "list of role names", id="roles_string"
        ),
        pytest.param(
            {"allowed_actions": {"f": {"arguments": {"x": {"pattern": "("}}}}},
            "is refused",
            id="bad_pattern",
        ),
        pytest.param(
            {"allowed_actions": {"f": {"arguments": {"x": {"pattern": "(a)\\1"}}}}},
            "only linear-time RE2 patterns run",
            id="backreference_pattern_refused",
        ),
        pytest.param(
            {"allowed_actions": {"f": {"arguments": {"x": {"min": 1}}}}},
            "enum / const / pattern / required",
            id="unknown_constraint",
        ),
        pytest.param(
            {"forbidden_calls": [{"arguments": {}}]}, "must be a name", id="forbidden_without_name"
        ),
        pytest.param(
            {"required_links": [{"from": "f.x", "to": "item.y"}]},
            "<tool>.arguments.<path>",
            id="link_without_arguments",
        ),
        pytest.param(
            {"required_links": [{"from": "f.arguments.x", "to": "y"}]},
            "'item.<field>'",
            id="link_bad_target",
        ),
    ],
)
def test_refused_definitions(definition: dict[str, Any], message: str) -> None:
    with pytest.raises(CheckDefinitionError, match=message):
        build_check({"type": "policy", "name": "p", **definition})


@pytest.mark.parametrize(
    ("item_role", "header_role", "verdict"),
    [
        pytest.param("support_lead", None, OK, id="item_role_alone"),
        pytest.param("trainee", "support_lead", OK, id="header_role_wins"),
        pytest.param("support_lead", "trainee", (False, "role_not_authorised"), id="header_denies"),
        pytest.param(None, "support_lead", OK, id="header_without_item_role"),
    ],
)
def test_the_role_header_wins_over_item_role(
    item_role: str | None, header_role: str | None, verdict: tuple[bool | None, str]
) -> None:
    item = {"payment_id": PID} | ({"role": item_role} if item_role else {})
    result = run(POLICY, wire(REFUND), item, CheckContext(role=header_role))
    parts = {part.name: (part.passed, part.reason_code) for part in result.parts}
    assert parts["refunds.authority_ok"] == verdict
