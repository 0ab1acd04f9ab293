"""Episode builders shared by the episode tests: chat messages, Responses items, plain events."""

from __future__ import annotations

import json
from typing import Any

from grader.loader import load_tasks
from grader.tasks import Task
from tests.support.tasks import EPISODES

EPISODE_TASKS = load_tasks(EPISODES)
# The fields a live row has and an offline (replayed) row does not: compared apart.
LIVE_FIELDS = {
    "request_id",
    "time",
    "model",
    "upstream",
    "stream",
    "variant",
    "run",
    "meta",
    "timings",
    "usage",
    "key_id",
}


def task(task_id: str) -> Task:
    found = EPISODE_TASKS.get(task_id)
    assert found is not None, task_id
    return found


Step = tuple[str, dict[str, Any], Any]  # (tool name, arguments, result)


def chat(steps: list[Step], final: str | None = "done", user: str = "go") -> list[dict[str, Any]]:
    """An OpenAI chat ``messages`` history: one assistant turn per call, then the final text."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": user}]
    for index, (name, arguments, result) in enumerate(steps):
        call_id = f"call_{index}"
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": name, "arguments": json.dumps(arguments)},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call_id, "content": json.dumps(result)})
    if final is not None:
        messages.append({"role": "assistant", "content": final})
    return messages


def responses(steps: list[Step], final: str | None = "done") -> list[dict[str, Any]]:
    """The same history as Responses API ``input`` items."""
    items: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for index, (name, arguments, result) in enumerate(steps):
        call_id = f"call_{index}"
        items.append(
            {
                "type": "function_call",
                "call_id": call_id,
                "name": name,
                "arguments": json.dumps(arguments),
            }
        )
        items.append(
            {"type": "function_call_output", "call_id": call_id, "output": json.dumps(result)}
        )
    if final is not None:
        items.append(
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": final}],
            }
        )
    return items


def events(steps: list[Step]) -> list[dict[str, Any]]:
    return [{"name": n, "arguments": a, "result": r} for n, a, r in steps]


# The worked billing task: the fix the record wants, step by step.
GOOD_BILLING: list[Step] = [
    ("list_payments", {"customer": "cus_42"}, {"payments": ["pay_1001", "pay_1002", "pay_2001"]}),
    ("get_payment", {"payment_id": "pay_1002"}, {"id": "pay_1002", "order": "ord_7"}),
    (
        "create_adjustment",
        {
            "payment_id": "pay_1002",
            "original_payment_id": "pay_1001",
            "amount": 4550,
            "reason": "duplicate_charge",
        },
        {"adjustment_id": "adj_1"},
    ),
    ("cancel_invoice", {"invoice_id": "inv_501"}, {"ok": True}),
]
GOOD_BILLING_FINAL = (
    "Order ord_7 was charged twice: pay_1002 is a duplicate charge of pay_1001. I adjusted "
    "pay_1002 against pay_1001 and cancelled its invoice inv_501."
)


def completion(message: dict[str, Any]) -> bytes:
    """A chat.completion body exactly as OpenAI sends it."""
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    return json.dumps(
        {
            "id": "chatcmpl-ep",
            "object": "chat.completion",
            "created": 1746900990,
            "model": "gpt-4.1-mini-2025-04-14",
            "choices": [
                {
                    "index": 0,
                    "message": {"content": None, "refusal": None, "annotations": [], **message},
                    "logprobs": None,
                    "finish_reason": finish,
                }
            ],
            "usage": {"prompt_tokens": 80, "completion_tokens": 19, "total_tokens": 99},
            "service_tier": "default",
            "system_fingerprint": "fp_ep",
        }
    ).encode()
