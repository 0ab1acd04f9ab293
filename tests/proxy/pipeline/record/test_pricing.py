"""The price table (``pricing.path``): what a response cost, in its row and in
``gradeproxy_cost_total``; a model without a price is counted, never guessed; the table is
reloaded with the tasks and a bad one keeps the old. The openai SDK is the client."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from gradeproxy.cli import main
from grader.pricing import ModelPrice, PriceTable, PriceTableError, load_prices, parse_prices
from proxy.state import TASKS
from tests.support.backend import JSON, Reply, ScriptedBackend, wire
from tests.support.metrics import metric_value
from tests.support.paths import REPO
from tests.support.proxy import ProxyFactory, rows_of

MINI = ModelPrice(input=0.40, output=1.60, cached_input=0.10)
TABLE = PriceTable({"gpt-4.1-mini": MINI, "flat": ModelPrice(input=2.0, output=8.0)})


def usage(i: int | None, o: int | None, cached: int | None = None) -> dict[str, int | None]:
    return {
        "input_tokens": i,
        "output_tokens": o,
        "cached_input_tokens": cached,
        "reasoning_tokens": None,
    }


# (model, usage, cost)
COSTS = [
    pytest.param("gpt-4.1-mini", usage(1_000_000, 0), 0.40, id="input_per_million"),
    pytest.param("gpt-4.1-mini", usage(0, 1_000_000), 1.60, id="output_per_million"),
    pytest.param(
        "gpt-4.1-mini", usage(80, 19, 64), (16 * 0.40 + 64 * 0.10 + 19 * 1.60) / 1e6,
        id="cached_part_of_input_at_its_price",
    ),
    pytest.param(
        "gpt-4.1-mini-2025-04-14", usage(80, 19, 64), (16 * 0.40 + 64 * 0.10 + 19 * 1.60) / 1e6,
        id="snapshot_date_priced_as_its_model",
    ),
    pytest.param("flat", usage(100, 10, 40), (100 * 2.0 + 10 * 8.0) / 1e6,
                 id="no_cached_price_charges_input"),
    pytest.param("gpt-4.1-mini", usage(10, 0, 50), 10 * 0.10 / 1e6,
                 id="cached_over_input_is_capped"),
    pytest.param("gpt-4.1", usage(80, 19), None, id="unknown_model_is_not_guessed"),
    pytest.param("gpt-4.1-mini-latest", usage(80, 19), None, id="other_suffix_is_not_stripped"),
    pytest.param("gpt-4.1-mini", usage(80, None), None, id="no_output_count_no_cost"),
    pytest.param("gpt-4.1-mini", None, None, id="no_usage"),
    pytest.param(None, usage(1, 1), None, id="no_model"),
]  # fmt: skip


@pytest.mark.parametrize(("model", "reported", "expected"), COSTS)
def test_a_response_costs_its_tokens_at_its_models_price(
    model: str | None, reported: dict[str, int | None] | None, expected: float | None
) -> None:
    cost = TABLE.cost(model, reported)
    if expected is None:
        assert cost is None
    else:
        assert cost == pytest.approx(expected, rel=1e-9)


# (the file's text, what the error names)
BAD = [
    pytest.param("models: {m: {input: 1}}", "models.m: missing output", id="missing_output"),
    pytest.param("models: {m: {input: 1, output: -1}}", "models.m.output", id="negative"),
    pytest.param("models: {m: {input: '1', output: 1}}", "models.m.input", id="string_price"),
    pytest.param("models: {m: {input: 1, output: 1, cache: 1}}", "unknown key(s) cache",
                 id="misspelt_key"),
    pytest.param("models: {m: {input: true, output: 1}}", "models.m.input", id="boolean"),
    pytest.param("gpt-4.1: {input: 1, output: 1}", "expected one key, 'models'", id="no_models"),
    pytest.param("models: {}", "'models' must map", id="empty"),
    pytest.param("models: [a, b]", "'models' must map", id="a_list"),
    pytest.param("models: {m: 3}", "models.m: expected input", id="not_a_mapping"),
    pytest.param("models: {m: {input: 1, output: [}", "not valid YAML", id="bad_yaml"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "named"), BAD)
def test_a_bad_price_table_is_refused_naming_the_file_and_entry(
    tmp_path: Path, text: str, named: str
) -> None:
    path = tmp_path / "prices.yaml"
    path.write_text(text)
    with pytest.raises(PriceTableError) as raised:
        load_prices(path)
    assert str(path) in str(raised.value)
    assert named in str(raised.value)


def test_a_missing_price_table_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PriceTableError, match="cannot read the price table"):
        load_prices(tmp_path / "absent.yaml")


def test_the_documented_example_table_loads() -> None:
    table = load_prices(REPO / "config" / "pricing" / "example.yaml")
    assert table.price("gpt-4.1-mini-2025-04-14") == MINI


YAMLISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=10,
)


@given(st.dictionaries(st.sampled_from(["models", "x"]), YAMLISH) | YAMLISH)
def test_any_parsed_yaml_is_a_table_or_a_price_table_error(data: Any) -> None:
    try:
        table = parse_prices(data)
    except PriceTableError:
        return
    for price in table.models.values():
        assert price.input >= 0
        assert price.output >= 0


MESSAGES: Any = [{"role": "user", "content": "Weather in Zürich, in celsius?"}]
CACHED = re.sub(rb'("cached_tokens":\s*)0', rb"\g<1>64", wire("openai_single_tool.json"))
# openai_single_tool.json: gpt-4.1-mini-2025-04-14, 80 input (64 cached here), 19 output.
MINI_COST = (16 * 0.40 + 64 * 0.10 + 19 * 1.60) / 1e6


def _table(path: Path, models: dict[str, dict[str, float]]) -> Path:
    path.write_text(yaml.safe_dump({"models": models}))
    return path


async def _sdk_call(client: Any) -> None:
    async with openai.AsyncOpenAI(
        base_url=str(client.make_url("/v1")), api_key="sk-test", max_retries=0
    ) as sdk:
        await sdk.chat.completions.create(
            model="gpt-4.1-mini",
            messages=MESSAGES,
            extra_headers={"X-Grade-Task": "weather.single"},
        )


@pytest.mark.e2e
async def test_the_row_and_the_counter_carry_the_cost_and_a_reload_swaps_the_table(
    make_proxy: ProxyFactory, backend: ScriptedBackend, results_path: Path, tmp_path: Path
) -> None:
    prices = _table(tmp_path / "prices.yaml", {"gpt-4.1-mini": {"input": 0.4, "output": 1.6,
                                                                "cached_input": 0.1}})  # fmt: skip
    backend.replies.extend([Reply(body=CACHED, content_type=JSON)] * 4)
    client = await make_proxy(pricing={"path": str(prices)})
    model = {"task": "weather.single", "variant": "primary", "model": "gpt-4.1-mini-2025-04-14"}

    await _sdk_call(client)
    [row] = await rows_of(client, results_path)
    assert row["cost"] == pytest.approx(MINI_COST, rel=1e-9)
    text = await (await client.get("/metrics")).text()
    assert metric_value(text, "gradeproxy_cost_total", **model) == pytest.approx(MINI_COST)
    assert metric_value(text, "gradeproxy_cost_unknown_model_total") == 0

    # The table drops the model (what SIGHUP runs): the next row has no cost, and is counted.
    _table(prices, {"gpt-4.1": {"input": 2, "output": 8}})
    assert await client.app[TASKS].reload()
    await _sdk_call(client)
    rows = await rows_of(client, results_path)
    assert rows[-1]["cost"] is None
    assert rows[-1]["usage"]["input_tokens"] == 80  # the usage is still there
    text = await (await client.get("/metrics")).text()
    assert metric_value(text, "gradeproxy_cost_unknown_model_total", **model) == 1
    assert metric_value(text, "gradeproxy_cost_total", **model) == pytest.approx(MINI_COST)

    # A bad table on reload keeps the old table (and the old tasks): still no price.
    prices.write_text("models: {gpt-4.1-mini: {input: 1}}")
    assert not await client.app[TASKS].reload()
    assert "missing output" in (client.app[TASKS].error or "")
    await _sdk_call(client)
    rows = await rows_of(client, results_path)
    assert rows[-1]["cost"] is None
    text = await (await client.get("/metrics")).text()
    assert metric_value(text, "gradeproxy_cost_unknown_model_total", **model) == 2
    assert metric_value(text, "gradeproxy_task_reloads_total", result="error") == 1


async def test_without_a_table_rows_say_null_and_nothing_is_counted_unknown(
    make_proxy: ProxyFactory, backend: ScriptedBackend, results_path: Path
) -> None:
    backend.replies.append(Reply(body=CACHED, content_type=JSON))
    client = await make_proxy()
    await _sdk_call(client)
    [row] = await rows_of(client, results_path)
    assert row["cost"] is None
    assert row["usage"] is not None
    text = await (await client.get("/metrics")).text()
    assert metric_value(text, "gradeproxy_cost_unknown_model_total") == 0
    assert metric_value(text, "gradeproxy_cost_total") == 0


async def test_a_bad_table_at_start_leaves_the_proxy_unready(
    make_proxy: ProxyFactory, tmp_path: Path
) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text("models: {m: {output: 1}}")
    client = await make_proxy(pricing={"path": str(prices)})
    assert not client.app[TASKS].ready
    assert "models.m: missing input" in (client.app[TASKS].error or "")


@pytest.mark.parametrize(
    ("text", "code", "said"),
    [
        pytest.param(
            "models: {gpt-4.1-mini: {input: 0.4, output: 1.6}}", 0, "pricing: 1 models priced",
            id="good_table",
        ),
        pytest.param(
            "models: {gpt-4.1-mini: {input: 0.4}}", 1,
            "check-config: pricing.path: ", id="bad_table_fails_in_one_line",
        ),
    ],
)  # fmt: skip
def test_check_config_reads_the_price_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, code: int, said: str
) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text(text)
    config = tmp_path / "config.yaml"
    config.write_text(f"upstream:\n  url: http://127.0.0.1:8000/v1\npricing:\n  path: {prices}\n")
    assert main(["check-config", "--config", str(config)]) == code
    captured = capsys.readouterr()
    assert said in (captured.out if code == 0 else captured.err)
    if code:
        assert captured.err.count("\n") == 1
