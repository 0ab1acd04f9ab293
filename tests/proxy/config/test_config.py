"""Config: defaults < file < GRADEPROXY_* environment < flags; every error names its field."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from gradeproxy.cli import main
from proxy.config import ConfigError, load_config
from tests.support.paths import REPO

BASE = "upstream:\n  url: http://127.0.0.1:8000/v1\n"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "upstream: {}\n", "upstream.url: must be an http(s) URL", id="missing_upstream_url"
        ),
        pytest.param(
            "upstream:\n  url: ftp://x/v1\n",
            "upstream.url: must be an http(s) URL",
            id="bad_scheme",
        ),
        pytest.param(
            BASE + "listen:\n  port: 70000\n", "listen.port: must be 0..65535", id="port_range"
        ),
        pytest.param(
            BASE + "listen:\n  port: eighty\n", "listen.port: must be an integer", id="port_type"
        ),
        pytest.param(
            BASE + "listen:\n  prot: 1\n", "listen.prot: unknown field", id="unknown_field"
        ),
        pytest.param(BASE + "lisen:\n  port: 1\n", "lisen: unknown section", id="unknown_section"),
        pytest.param(
            BASE + "grading:\n  sample_rate: 2\n",
            "grading.sample_rate: must be within 0..1",
            id="sample_rate_range",
        ),
        pytest.param(
            BASE + "grading:\n  batch_window_s: 5\n",
            "grading.batch_window_s: must be within 0..1",
            id="batch_window_range",
        ),
        pytest.param(
            BASE + "grading:\n  queue_size: 0\n",
            "grading.queue_size: must be >= 1",
            id="queue_size",
        ),
        pytest.param(
            BASE + "logging:\n  level: loud\n", "logging.level: must be one of", id="closed_set"
        ),
        pytest.param(
            BASE + "results:\n  capture_answer: maybe\n",
            "results.capture_answer: must be true or false",
            id="boolean",
        ),
        pytest.param(
            BASE + "results:\n  answer: keep\n  capture_answer: true\n",
            "results.capture_answer: give results.answer or its deprecated alias",
            id="answer_and_its_alias",
        ),
        pytest.param(
            BASE + "results:\n  answer: redact\n",
            "results.answer: must be one of",
            id="answer_closed_set",
        ),
        pytest.param(
            BASE + "results:\n  capture_untagged: 1.5\n",
            "results.capture_untagged: must be within 0..1",
            id="capture_untagged_rate",
        ),
        pytest.param(
            BASE + "metrics:\n  models: gpt\n",
            "metrics.models: must be a list of strings",
            id="list",
        ),
        pytest.param(
            BASE + "upstream:\n  url: http://x/v1\n  api_key_env: NOPE_NOT_SET\n",
            "upstream.api_key_env: environment variable NOPE_NOT_SET is not set",
            id="missing_secret",
        ),
        pytest.param(
            BASE + "auth:\n  keys_env: NOPE_NOT_SET\n",
            "auth.keys_env: environment variable NOPE_NOT_SET is not set",
            id="missing_inbound_keys_variable",
        ),
        pytest.param(
            BASE + "auth:\n  keys_env: TEST_EMPTY_KEYS\n",
            "auth.keys_env: TEST_EMPTY_KEYS holds no key",
            id="inbound_keys_variable_empty",
        ),
        pytest.param(
            BASE + "client:\n  header_timeout_s: 0\n",
            "client.header_timeout_s: must be > 0",
            id="client_timeout_positive",
        ),
        pytest.param(
            BASE + "scoring:\n  on_admin_port: true\n",
            "scoring.on_admin_port: needs admin.port",
            id="scoring_on_admin_needs_admin_port",
        ),
        pytest.param(
            BASE + "listen:\n  workers: 0\n",
            "listen.workers: must be within 1..256",
            id="workers_at_least_one",
        ),
        pytest.param(
            BASE + "listen:\n  workers: 2\n",
            "listen.workers: more than 1 needs a fixed admin.port",
            id="workers_need_an_admin_port",
        ),
        pytest.param(
            BASE + "listen:\n  workers: 2\nadmin:\n  port: 0\n",
            "listen.workers: more than 1 needs a fixed admin.port",
            id="workers_need_a_fixed_admin_port",
        ),
        pytest.param(
            BASE + "listen:\n  workers: 4\nadmin:\n  port: 65534\n",
            "admin.port: admin.port + listen.workers - 1 must be <= 65535",
            id="worker_admin_ports_in_range",
        ),
        pytest.param(
            BASE + "listen:\n  port: 9101\n  workers: 2\nadmin:\n  port: 9100\n",
            "listen.port: must not be one of the workers' admin ports",
            id="traffic_port_apart_from_admin_ports",
        ),
        pytest.param("- a\n- b\n", "the config must be a mapping of sections", id="not_a_mapping"),
        pytest.param("upstream: [\n", "not valid YAML", id="bad_yaml"),
    ],
)
def test_bad_config_names_the_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, message: str
) -> None:
    monkeypatch.setenv("TEST_EMPTY_KEYS", " , ")
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text), environ={})
    assert message in str(caught.value)


def test_precedence_file_then_environment_then_flags(tmp_path: Path) -> None:
    path = write(
        tmp_path, BASE + "listen:\n  port: 9000\n  host: 0.0.0.0\ngrading:\n  workers: 3\n"
    )
    environ = {
        "GRADEPROXY_LISTEN_PORT": "9100",
        "GRADEPROXY_GRADING_SAMPLE_RATE": "0.5",
        "GRADEPROXY_METRICS_MODELS": "a, b",
        "GRADEPROXY_RESULTS_ANSWER": "hash",
        "GRADEPROXY_TASKS_PATH": "",
        "UNRELATED": "x",
    }
    config = load_config(path, {"listen": {"port": 9200, "host": None}}, environ=environ)
    assert config.listen.port == 9200  # flag beats environment beats file
    assert config.listen.host == "0.0.0.0"  # a flag left unset does not override
    assert config.grading.workers == 3
    assert config.grading.sample_rate == 0.5
    assert config.metrics.models == ("a", "b")
    assert (config.results.answer, config.results.keeps_answer) == ("hash", False)
    assert config.tasks.path is None


@pytest.mark.parametrize(
    ("environ", "flags", "workers", "admin"),
    [
        pytest.param({}, {}, 1, None, id="default_one_process"),
        pytest.param(
            {"GRADEPROXY_LISTEN_WORKERS": "4", "GRADEPROXY_ADMIN_PORT": "9100"},
            {},
            4,
            9100,
            id="from_the_environment",
        ),
        pytest.param(
            {"GRADEPROXY_LISTEN_WORKERS": "4", "GRADEPROXY_ADMIN_PORT": "9100"},
            {"listen": {"workers": 2}},
            2,
            9100,
            id="flag_beats_environment",
        ),
    ],
)
def test_listen_workers(
    tmp_path: Path,
    environ: dict[str, str],
    flags: dict[str, Any],
    workers: int,
    admin: int | None,
) -> None:
    config = load_config(write(tmp_path, BASE), flags, environ=environ)
    assert (config.listen.workers, config.admin.port) == (workers, admin)


def test_unknown_environment_field_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=re.escape("listen.prot: unknown field")):
        load_config(write(tmp_path, BASE), environ={"GRADEPROXY_LISTEN_PROT": "1"})


def test_secrets_appear_only_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_KEY", "sk-very-secret")
    config = load_config(write(tmp_path, BASE + "  api_key_env: MY_KEY\n"), environ={})
    assert config.upstream_api_key() == "sk-very-secret"
    assert "sk-very-secret" not in repr(config.redacted())
    assert config.redacted()["upstream"]["api_key_env"] == "MY_KEY"


@pytest.mark.parametrize(
    ("text", "code", "out"),
    [
        pytest.param(BASE, 0, "config ok", id="valid"),
        pytest.param("upstream: {}\n", 1, "upstream.url", id="invalid"),
        pytest.param(
            BASE + "listen:\n  workers: 3\nadmin:\n  port: 9100\n",
            0,
            "listening on 127.0.0.1:8080 with 3 workers (admin ports 9100-9102)",
            id="workers",
        ),
    ],
)
def test_check_config_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, code: int, out: str
) -> None:
    assert main(["check-config", "--config", str(write(tmp_path, text))]) == code
    captured = capsys.readouterr()
    assert out in captured.out + captured.err


def test_check_config_loads_tasks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x"}\n')
    assert main(["check-config", "--config", str(write(tmp_path, BASE)), "--tasks", str(bad)]) == 1
    assert "bad.jsonl:1:" in capsys.readouterr().err


def test_example_configs_are_valid(capsys: pytest.CaptureFixture[str]) -> None:
    root = REPO
    examples: list[Any] = sorted((root / "config").glob("*.yaml")) + sorted(
        (root / "deploy" / "config").glob("*.yaml")
    )
    assert examples
    for example in examples:
        assert (
            main(
                [
                    "check-config",
                    "--config",
                    str(example),
                    "--tasks",
                    str(root / "config" / "tasks"),
                ]
            )
            == 0
        ), capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "located"),
    [
        pytest.param(BASE + "listen:\n  port: 70000\n", "config.yaml:4: listen.port:", id="field"),
        pytest.param(
            BASE + "routes:\n  - match: a\n    url: http://y/v1\n  - match: b\n    url: ftp://z\n",
            "config.yaml:7: routes[1].url:",
            id="list_item_field",
        ),
        pytest.param(
            BASE + "upstream:\n  url: [\n", "config.yaml:5: not valid YAML: expected", id="syntax"
        ),
        pytest.param("upstream: {}\n", "config.yaml:1: upstream.url:", id="absent_field"),
        pytest.param(BASE + "lisen: {}\n", "config.yaml:3: lisen: unknown section", id="section"),
    ],
)
def test_config_errors_name_file_and_line_in_one_line(
    tmp_path: Path, text: str, located: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text), environ={})
    message = str(caught.value)
    assert message.startswith(f"{tmp_path}/{located}")
    assert "\n" not in message


@pytest.mark.parametrize(
    ("results", "answer", "keeps"),
    [
        pytest.param("  capture_answer: true\n", "keep", True, id="alias_true_keeps"),
        pytest.param("  capture_answer: false\n", "drop", False, id="alias_false_drops"),
    ],
)
def test_capture_answer_is_a_deprecated_alias_of_answer(
    tmp_path: Path, results: str, answer: str, keeps: bool
) -> None:
    with pytest.warns(FutureWarning, match=f"write 'results.answer: {answer}' instead"):
        config = load_config(write(tmp_path, BASE + "results:\n" + results), environ={})
    assert (config.results.answer, config.results.keeps_answer) == (answer, keeps)


@pytest.mark.parametrize("answer", ["keep", "hash", "drop"])
def test_answer_modes_load_without_a_warning(tmp_path: Path, answer: str) -> None:
    config = load_config(write(tmp_path, BASE + f"results:\n  answer: {answer}\n"), environ={})
    assert (config.results.answer, config.results.capture_answer) == (answer, None)
