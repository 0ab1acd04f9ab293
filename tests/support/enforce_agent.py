"""An OpenAI Agents SDK agent for the enforce tests: one run against a server whose answers a
policy blocked or stripped, streamed or not.

Runs in the SDK's own virtual environment (scripts/agents-venv.sh), never the project's.
Usage: ``python enforce_agent.py '<json config>'`` with ``base_url``, ``api``
(``chat_completions`` or ``responses``) and ``stream``: true runs ``Runner.run_streamed``, so the
SDK reads the enforced SSE bytes itself; false runs ``Runner.run`` on whole answers. Prints one
JSON object: the final output and the tools the agent executed, in order; tracing is off.
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
EXECUTED: list[str] = []


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    EXECUTED.append("get_weather")
    return json.dumps({"city": city, "temp_c": 12})


@function_tool
def get_time(timezone: str) -> str:
    """The time in a timezone."""
    EXECUTED.append("get_time")
    return json.dumps({"timezone": timezone, "time": "12:00"})


@function_tool
def delete_payment(payment_id: str) -> str:
    """Delete a payment (the call the policy forbids)."""
    EXECUTED.append("delete_payment")
    return json.dumps({"deleted": payment_id})


async def main(config: dict[str, Any]) -> None:
    client = AsyncOpenAI(base_url=config["base_url"], api_key="sk-test", max_retries=0)
    agent = Agent(
        name="enforced",
        instructions="Answer with the tools.",
        model=(
            OpenAIResponsesModel(model="gpt-4.1-mini", openai_client=client)
            if config["api"] == "responses"
            else OpenAIChatCompletionsModel(model="gpt-4.1-mini", openai_client=client)
        ),
        model_settings=ModelSettings(temperature=0),
        tools=[get_weather, get_time, delete_payment],
    )
    prompt = "Weather in Paris, then delete pay_1002."
    if config["stream"]:
        streamed = Runner.run_streamed(agent, prompt, max_turns=4)
        async for _ in streamed.stream_events():
            pass
        final = streamed.final_output
    else:
        final = (await Runner.run(agent, prompt, max_turns=4)).final_output
    print(json.dumps({"final": final, "executed": EXECUTED}))


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
