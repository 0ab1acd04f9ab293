"""The rows database in the deploy files: compose runs PostgreSQL and a one-shot migration, the
Kubernetes pods read the URL and password from a Secret and a Job runs ``db migrate``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gradeproxy.cli import _build_parser
from proxy.config import load_config
from tests.support.paths import REPO
from tests.support.tools import require_tool, run_tool

COMPOSE = REPO / "deploy" / "compose.yaml"
ROWS_DB = REPO / "deploy" / "k8s" / "rows-db"
DEPLOYMENT = REPO / "deploy" / "k8s" / "deployment.yaml"


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {item["name"]: item for item in container["env"]}


def test_compose_runs_postgres_and_a_one_shot_migration_before_the_proxy() -> None:
    services = load(COMPOSE)["services"]
    assert services["postgres"]["image"].startswith("postgres:")
    migrate = services["migrate"]
    assert migrate["command"][:2] == ["db", "migrate"]
    assert migrate["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert migrate["restart"] == "no"
    proxy = services["proxy"]
    assert proxy["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    env = proxy["environment"]
    assert env["GRADEPROXY_RESULTS_SINK"] == migrate["command"][2]  # one database
    assert ":" not in env["GRADEPROXY_RESULTS_SINK"].split("//", 1)[1].split("@")[0]  # no password
    assert env["GRADEPROXY_RESULTS_SINK_PASSWORD_ENV"] in env


def test_the_compose_proxy_environment_loads_as_a_sink_config(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = {k: str(v).replace("${ROWS_DB_PASSWORD:-gradeproxy-local}", "pw")
           for k, v in load(COMPOSE)["services"]["proxy"]["environment"].items()}  # fmt: skip
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    config = load_config(REPO / "deploy" / "config" / "proxy.yaml", {}, env)
    assert config.results.sink == "postgresql://gradeproxy@postgres:5432/gradeproxy"
    assert str(config.results.spill_path).startswith("/var/lib/gradeproxy/results/")


def test_the_migration_job_reads_the_secret_and_runs_db_migrate() -> None:
    job = load(ROWS_DB / "migrate-job.yaml")
    assert job["kind"] == "Job"
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["db", "migrate", "$(ROWS_DB_URL)"]
    env = env_of(container)
    for name, key in (("ROWS_DB_URL", "url"), ("PGPASSWORD", "password")):
        ref = env[name]["valueFrom"]["secretKeyRef"]
        assert (ref["name"], ref["key"]) == ("gradeproxy-rows-db", key)
    args = _build_parser().parse_args(["db", "migrate", "postgresql://u@h/db"])
    assert (args.command, args.db_action) == ("db", "migrate")
    assert load(ROWS_DB / "kustomization.yaml")["resources"] == ["migrate-job.yaml"]


def test_the_pods_read_the_sink_url_and_password_from_the_secret_optionally() -> None:
    (container,) = load(DEPLOYMENT)["spec"]["template"]["spec"]["containers"]
    env = env_of(container)
    for name, key in (("GRADEPROXY_RESULTS_SINK", "url"), ("ROWS_DB_PASSWORD", "password")):
        ref = env[name]["valueFrom"]["secretKeyRef"]
        assert (ref["name"], ref["key"], ref["optional"]) == ("gradeproxy-rows-db", key, True)
    assert env["GRADEPROXY_RESULTS_SINK_PASSWORD_ENV"]["value"] == "ROWS_DB_PASSWORD"
    names = list(env)
    assert names.index("POD_NAME") < names.index("GRADEPROXY_RESULTS_SPILL_PATH")
    assert "$(POD_NAME)" in env["GRADEPROXY_RESULTS_SPILL_PATH"]["value"]


def test_kubernetes_validate_strict_migration_job() -> None:
    tool = require_tool("kubernetes-validate")
    result = run_tool(tool, "--strict", "migrate-job.yaml", cwd=ROWS_DB)
    assert result.returncode == 0, result.stdout + result.stderr
