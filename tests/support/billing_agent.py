"""The billing agent of the episode end-to-end test, run by the OpenAI Agents SDK.

Runs in the SDK's own virtual environment (scripts/agents-venv.sh), never the project's: the
SDK pins openai and mcp. Usage: ``python billing_agent.py '<json config>'`` with ``base_url``
(the proxy's /v1), ``headers`` (the grade headers every request carries) and ``api``
(``chat_completions``, or ``responses``: the SDK's default model). Prints one JSON
object: the final output and the run's history as Responses input items (``to_input_list``).
Tracing is off: the SDK would post traces to OpenAI otherwise.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

set_tracing_disabled(True)


@function_tool
def list_payments(customer: str) -> str:
    """List a customer's payment ids."""
    return json.dumps({"payments": ["pay_1001", "pay_1002", "pay_2001"], "customer": customer})


@function_tool
def get_payment(payment_id: str) -> str:
    """Fetch one payment."""
    return json.dumps({"id": payment_id, "order": "ord_7", "amount": 4550})


@function_tool
def create_adjustment(payment_id: str, original_payment_id: str, amount: int, reason: str) -> str:
    """Adjust a duplicate payment against the original one."""
    return json.dumps({"adjustment_id": "adj_1", "payment_id": payment_id})


@function_tool
def cancel_invoice(invoice_id: str) -> str:
    """Cancel an open invoice."""
    return json.dumps({"ok": True, "invoice_id": invoice_id})


async def main(config: dict[str, Any]) -> None:
    client = AsyncOpenAI(
        base_url=config["base_url"],
        api_key="sk-test",
        default_headers=config["headers"],
        max_retries=0,
    )
    agent = Agent(
        name="billing",
        instructions="Fix duplicate charges. Cite the records you used.",
        model=(
            OpenAIResponsesModel(model="gpt-4.1-mini", openai_client=client)
            if config["api"] == "responses"
            else OpenAIChatCompletionsModel(model="gpt-4.1-mini", openai_client=client)
        ),
        model_settings=ModelSettings(temperature=0),
        tools=[list_payments, get_payment, create_adjustment, cancel_invoice],
    )
    result = await Runner.run(agent, "Order ord_7 of cus_42 was charged twice.", max_turns=8)
    print(json.dumps({"final": result.final_output, "input": result.to_input_list()}))


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
