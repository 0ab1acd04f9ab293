"""Through the live proxy, a client's tool schema can neither reach another host nor stall
grading: a remote ``$ref`` is an ``error`` column and nothing arrives at the listening server; a
backtracking pattern is answered at once (with Python's ``re`` it would outlast pytest's
timeout)."""

from __future__ import annotations

from pathlib import Path

from grader.json import dumps
from tests.support.backend import Listener
from tests.support.proxy import ProxyFactory, rows_of


async def test_no_fetch_and_no_stall_through_the_live_proxy(
    listener: Listener,
    make_proxy: ProxyFactory,
    results_path: Path,
    tasks_file: Path,
) -> None:
    task = {
        "id": "weather.schema",
        "expected": {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}},
        "checks": [{"type": "json_schema", "name": "schema", "schema": "from_request"}],
        "metadata": {"mutationKind": "none"},
    }
    with tasks_file.open("ab") as out:
        out.write(dumps(task) + b"\n")
    requests = [
        {"$ref": f"{listener.url}/remote.json"},
        {"type": "object", "properties": {"unit": {"type": "string", "pattern": "^(c+)+$"}}},
    ]
    client = await make_proxy()
    for parameters in requests:
        tools = [
            {"type": "function", "function": {"name": "get_weather", "parameters": parameters}}
        ]
        response = await client.post(
            "/v1/chat/completions",
            data=dumps({"model": "m", "tools": tools}),
            headers={"X-Grade-Task": "weather.schema"},
        )
        assert response.status == 200
    rows = await rows_of(client, results_path)
    assert [r["checks"][0]["reason_code"] for r in rows] == [
        "schema_ref_unresolvable",
        "schema_invalid",  # "celsius" does not match ^(c+)+$ — answered, not stalled
    ]
    assert listener.hits == []
