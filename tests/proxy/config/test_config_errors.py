"""Config errors that help: they name the variable or flag that set the value, closed sets ignore
case, base URLs without /v1 are caught, the schema matches the loader, and --help says enough."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from gradeproxy.cli import main
from proxy.config import Config, ConfigError, load_config, url_warnings
from proxy.config.schema import config_schema
from tests.support.paths import REPO

V1 = {"upstream": {"url": "http://127.0.0.1:8000/v1"}}
EXAMPLES = sorted((REPO / "config").glob("*.yaml")) + sorted(
    (REPO / "deploy" / "config").glob("*.yaml")
)


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        pytest.param(
            {"GRADEPROXY_UPSTREAM_API_KEY": "sk-x"},
            "shadow, strip_client_credentials, tls, trust_env, url); "
            "did you mean upstream.api_key_env?"
            " (from environment variable GRADEPROXY_UPSTREAM_API_KEY)",
            id="misspelt_secret_variable",
        ),
        pytest.param(
            {"GRADEPROXY_GRADING_WORKERS": "abc"},
            "grading.workers: must be an integer, got 'abc' "
            "(from environment variable GRADEPROXY_GRADING_WORKERS)",
            id="integer",
        ),
        pytest.param(
            {"GRADEPROXY_LOGGING_FORMAT": "xml"},
            "(from environment variable GRADEPROXY_LOGGING_FORMAT)",
            id="closed_set",
        ),
        pytest.param(
            {"GRADEPROXY_UPSTREAM_URL": "http://backend:8000"},
            "(try http://backend:8000/v1) (from environment variable GRADEPROXY_UPSTREAM_URL)",
            id="url_from_environment_overrides_file",
        ),
    ],
)
def test_environment_errors_name_the_variable(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)) as raised:
        load_config(None, V1 if "GRADEPROXY_UPSTREAM_URL" not in environ else None, environ)
    assert "GRADEPROXY_" in str(raised.value)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["--port", "70000"], "listen.port: must be 0..65535 (from flag --port)"),
        pytest.param(["--upstream", "http://h:1"], "(try http://h:1/v1) (from flag --upstream)"),
        pytest.param(["--upstream", "h:1/v1"], "must be an http(s) URL"),
        pytest.param(
            ["--workers", "0"], "listen.workers: must be within 1..256 (from flag --workers)"
        ),
        pytest.param(
            ["--workers", "2"],
            "listen.workers: more than 1 needs a fixed admin.port (worker i serves /metrics",
        ),
    ],
    ids=["port_range", "bare_host", "no_scheme", "workers_range", "workers_need_admin_port"],
)
def test_flag_errors_name_the_flag(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    base = [] if "--upstream" in argv else ["--upstream", "http://127.0.0.1:8000/v1"]
    assert main(["check-config", *base, *argv]) == 1
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("text", "error", "suggestion"),
    [
        pytest.param("lisen:\n  port: 1\n", "lisen: unknown section", "listen", id="section"),
        pytest.param("listen:\n  prot: 1\n", "listen.prot: unknown", "listen.port", id="field"),
        pytest.param("grading:\n  worker: 1\n", "grading.worker:", "grading.workers", id="plural"),
    ],
)
def test_a_misspelt_key_gets_the_closest_known_one(
    tmp_path: Path, text: str, error: str, suggestion: str
) -> None:
    file = tmp_path / "config.yaml"
    file.write_text("upstream:\n  url: http://127.0.0.1:8000/v1\n" + text)
    with pytest.raises(ConfigError, match=re.escape(error)) as raised:
        load_config(file, environ={})
    assert str(raised.value).endswith(f"; did you mean {suggestion}?")


@pytest.mark.parametrize(
    ("section", "field", "given", "expected"),
    [
        ("logging", "level", "DEBUG", "debug"),
        ("logging", "level", "Warning", "warning"),
        ("logging", "format", "CONSOLE", "console"),
    ],
)
def test_closed_sets_ignore_case(section: str, field: str, given: str, expected: str) -> None:
    variable = f"GRADEPROXY_{section}_{field}".upper()
    from_env = load_config(None, V1, {variable: given})
    from_file = load_config(None, {**V1, section: {field: given}}, {})
    assert getattr(getattr(from_env, section), field) == expected
    assert getattr(getattr(from_file, section), field) == expected


SHADOW = {"url": "http://candidate:8000/v1"}


@pytest.mark.parametrize(
    ("config", "where"),
    [
        pytest.param({"upstream": {"url": "http://backend:8000"}}, "upstream.url", id="upstream"),
        pytest.param({"upstream": {"url": "https://api.example/"}}, "upstream.url", id="slash"),
        pytest.param(
            {**V1, "routes": [{"match": "x*", "url": "http://other:9000"}]},
            "routes[0].url",
            id="route",
        ),
        pytest.param(
            {"upstream": {"url": V1["upstream"]["url"], "shadow": {"url": "http://cand"}}},
            "upstream.shadow.url",
            id="shadow",
        ),
        pytest.param({**V1, "judge": {"endpoint": "http://judge:8080"}}, "judge.endpoint", id="j"),
    ],
)
def test_a_bare_host_is_an_error_with_a_hint(config: dict[str, Any], where: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{re.escape(where)}: .* has no path; .*/v1") as e:
        load_config(None, config, {})
    assert "(try http" in str(e.value)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        pytest.param("http://user:pw@backend:8000/v1", "credentials in the URL", id="userinfo"),
        pytest.param("http://user@backend:8000/v1", "credentials in the URL", id="user_only"),
        pytest.param("http://backend:8000/v1?key=k", "query or fragment", id="query"),
        pytest.param("http://backend:8000/v1#x", "query or fragment", id="fragment"),
        pytest.param("http://backend:99999/v1", "no valid port", id="port_out_of_range"),
        pytest.param("http://backend:port/v1", "no valid port", id="port_not_a_number"),
    ],
)
@pytest.mark.parametrize("where", ["upstream.url", "routes[0].url", "upstream.shadow.url"])
def test_a_base_url_part_no_request_would_carry_is_refused(
    url: str, message: str, where: str
) -> None:
    configs: dict[str, dict[str, Any]] = {
        "upstream.url": {"upstream": {"url": url}},
        "routes[0].url": {**V1, "routes": [{"match": "x*", "url": url}]},
        "upstream.shadow.url": {"upstream": {"url": V1["upstream"]["url"], "shadow": {"url": url}}},
    }
    with pytest.raises(ConfigError, match=rf"^{re.escape(where)}: .*{re.escape(message)}"):
        load_config(None, configs[where], {})


@pytest.mark.parametrize(
    ("config", "warned"),
    [
        pytest.param(V1, [], id="v1_is_quiet"),
        pytest.param({"upstream": {"url": "http://b:1/v1/"}}, [], id="trailing_slash_is_quiet"),
        pytest.param(
            {"upstream": {"url": "https://generativelanguage.example/v1beta/openai/"}},
            ["upstream.url"],
            id="other_path_warns",
        ),
        pytest.param(
            {"upstream": {"url": "https://x.example/v1beta/openai/", "allow_non_v1_path": True}},
            [],
            id="silenced",
        ),
        pytest.param(
            {
                "upstream": {"url": "http://b:1/v1", "shadow": {"url": "http://c:1/api"}},
                "routes": [{"match": "m*", "url": "http://r:1/openai", "shadow": SHADOW}],
                "judge": {"endpoint": "http://j:1/api/v2"},
            },
            ["upstream.shadow.url", "routes[0].url", "judge.endpoint"],
            id="every_block",
        ),
    ],
)
def test_a_path_not_ending_in_v1_warns(config: dict[str, Any], warned: list[str]) -> None:
    warnings = url_warnings(load_config(None, config, {}))
    assert sorted(w.split(":")[0] for w in warnings) == sorted(warned)
    assert all("allow_non_v1_path: true" in w for w in warnings)


def test_check_config_prints_the_warning_and_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-config", "--upstream", "https://x.example/v1beta/openai/"]) == 0
    captured = capsys.readouterr()
    assert "warning: upstream.url: 'https://x.example/v1beta/openai/' does not end in /v1" in (
        captured.err
    )
    assert "config ok" in captured.out


def test_the_schema_is_a_valid_draft_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(config_schema())


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_example_config_matches_the_schema(example: Path) -> None:
    data = yaml.safe_load(example.read_text())
    jsonschema.Draft202012Validator(config_schema()).validate(data)


@pytest.mark.parametrize(
    ("data", "path"),
    [
        pytest.param({"listen": {"prot": 1}}, ["listen"], id="unknown_field"),
        pytest.param({"lisen": {}}, [], id="unknown_section"),
        pytest.param({"logging": {"level": "loud"}}, ["logging", "level"], id="closed_set"),
        pytest.param({"grading": {"workers": "2"}}, ["grading", "workers"], id="type"),
        pytest.param({"routes": [{"mach": "x"}]}, ["routes", 0], id="route_field"),
    ],
)
def test_the_schema_refuses_what_the_loader_refuses(
    tmp_path: Path, data: dict[str, Any], path: list[Any]
) -> None:
    errors = list(jsonschema.Draft202012Validator(config_schema()).iter_errors(data))
    assert [list(error.absolute_path) for error in errors] == [path]
    file = tmp_path / "config.yaml"
    file.write_text(yaml.safe_dump({**V1, **data}))
    with pytest.raises(ConfigError):
        load_config(file, environ={})


def test_config_schema_command_prints_the_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config-schema"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)  # JSON is YAML
    assert printed == config_schema()
    assert set(printed["properties"]) == {f.name for f in dataclasses.fields(Config)}


@pytest.mark.parametrize(
    "argv",
    [["check-config"], ["serve"], ["grade", "--tasks", "t", "--answers", "a"], ["demo"]],
    ids=lambda argv: argv[0],
)
def test_a_bad_flag_prints_the_subcommand_usage(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    command = argv[0]
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--bogus"])
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert err.startswith(f"usage: gradeproxy {command} ")
    assert f"gradeproxy {command}: error: unrecognized arguments: --bogus" in err


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        ("serve", "GRADEPROXY_<SECTION>_<FIELD>"),
        ("check-config", "GRADEPROXY_LOGGING_LEVEL"),
        ("serve", f"config default: {Config().listen.host}"),
        ("serve", f"config default: {Config().listen.port}"),
        ("serve", f"config default: {Config().results.path}"),
        ("demo", "(default: 8080)"),
        ("demo", "(default: results/demo.jsonl)"),
    ],
)
def test_help_shows_defaults_and_the_environment(
    capsys: pytest.CaptureFixture[str], command: str, shown: str
) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert shown in " ".join(capsys.readouterr().out.split())
