"""The layout's rules hold: `lint-imports` enforces them, and its contract covers every module;
the test tree mirrors the code tree, and no test module imports another.

pyproject.toml's import-linter contracts list the grader's core module by module (every grader
module but the console-script package ``grader.cli``) and the proxy's pipeline stage by stage,
in order. A module added to ``grader/`` or ``proxy/pipeline/`` and not to its list would escape
the rule silently, so these tests keep the lists complete, and run the linter itself so a broken
contract fails the suite as well as the CI step.
"""

from __future__ import annotations

import ast
import pkgutil
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import grader
import proxy.pipeline
from tests.support.paths import REPO


def contracts() -> list[dict[str, list[str] | str]]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    found: list[dict[str, list[str] | str]] = config["tool"]["importlinter"]["contracts"]
    return found


def test_the_pure_core_contract_lists_every_grader_module_but_the_cli() -> None:
    core = next(c for c in contracts() if str(c["name"]).startswith("grader's core is pure"))
    modules = {f"grader.{m.name}" for m in pkgutil.iter_modules(grader.__path__)}
    # The two adapters to the world outside: the console script and the rows database's I/O
    # (a database driver, URLs), which the proxy's sink and the offline commands share.
    assert set(core["source_modules"]) == modules - {"grader.cli", "grader.rowsdb"}
    forbidden = set(core["forbidden_modules"])
    assert {"proxy", "aiohttp", "urllib", "socket", "grader.cli", "grader.rowsdb"} <= forbidden


def test_the_pipeline_layers_name_every_stage() -> None:
    layers = next(c for c in contracts() if c.get("type") == "layers")
    assert layers["containers"] == ["proxy.pipeline"]
    named = [name.strip() for layer in layers["layers"] for name in str(layer).split("|")]
    stages = {m.name for m in pkgutil.iter_modules(proxy.pipeline.__path__)}
    assert sorted(named) == sorted(stages)


def test_the_import_contracts_are_kept() -> None:
    linter = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    result = subprocess.run(
        [linter], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


def test_a_task_holds_definitions_so_grader_tasks_imports_no_check_code() -> None:
    """Issue 12: the engine builds checks and the loader validates them, never the task model."""
    contract = next(c for c in contracts() if c["source_modules"] == ["grader.tasks"])
    forbidden = set(contract["forbidden_modules"])
    assert {"grader.checks", "grader.engine", "grader.loader"} <= forbidden


# --- the test tree ----------------------------------------------------------------------------
# Test modules mirror the code tree (tests/grader/checks/ tests grader/checks/, tests/proxy/
# pipeline/capture/ tests proxy/pipeline/capture/, tests/deploy/ tests deploy/); a suite that
# crosses packages lives in one of the declared folders below. Shared code is tests/support's
# alone: a test module that imports another drags in its fixtures and its module-level work,
# and hides the helper where the next suite will copy it instead.

TESTS = REPO / "tests"
CROSS_CUTTING = {
    "e2e": "whole-product runs: every surface, the SDKs, real Prometheus, llama.cpp, the wheel",
    "conformance": "agreement with someone else's definition: BFCL's checker, the openai SDK",
    "docs": "what the docs quote is what the code does",
}
NOT_TESTS = {"support": "the shared helpers and fixtures", "fixtures": "recorded wire data"}
ROOT_MODULES = {"test_architecture.py"}  # the layout itself, tree-wide


def module_name(path: Path, repo: Path) -> str:
    parts = path.relative_to(repo).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source: str, module: str, is_package: bool) -> list[str]:
    """Every module an import statement (anywhere in the file) or ``pytest_plugins`` names,
    relative imports resolved against ``module``."""
    package = module if is_package else module.rpartition(".")[0]
    names: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            # ``from tests import x`` names the module tests.x; elsewhere the names are attributes
            names += [f"{base}.{a.name}" for a in node.names] if base == "tests" else [base]
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytest_plugins" for t in node.targets
        ):
            names += [
                c.value
                for c in ast.walk(node.value)
                if isinstance(c, ast.Constant) and isinstance(c.value, str)
            ]
    return names


def imports_of_test_code(source: str, module: str, is_package: bool = False) -> list[str]:
    """The imports of test code other than tests.support: each one breaks the rule."""
    return [
        name
        for name in imported_modules(source, module, is_package)
        if (name == "tests" or name.startswith("tests."))
        and name != "tests.support"
        and not name.startswith("tests.support.")
    ]


def misplaced(tests: Path, repo: Path) -> list[str]:
    """Folders under ``tests`` with no counterpart in the code tree (nor declared), and test
    modules where none belong: in tests/support or tests/fixtures, or loose at the top."""
    found: list[str] = []
    for folder in sorted(p for p in tests.rglob("*") if p.is_dir()):
        rel = folder.relative_to(tests)
        if any(part.startswith((".", "__")) for part in rel.parts):
            continue
        top = rel.parts[0]
        if top in NOT_TESTS and any(folder.glob("test_*.py")):
            found.append(f"{rel.as_posix()}/: test modules in a folder that is not a suite")
        elif top not in CROSS_CUTTING and top not in NOT_TESTS and not (repo / rel).is_dir():
            found.append(f"{rel.as_posix()}/: no {rel.as_posix()}/ in the code tree")
    found += [
        f"{p.name}: a test module at the top of tests/"
        for p in sorted(tests.glob("test_*.py"))
        if p.name not in ROOT_MODULES
    ]
    found += [
        f"{p.relative_to(tests).as_posix()}: a second conftest (shared fixtures: tests/support)"
        for p in sorted(tests.rglob("conftest.py"))
        if p.parent != tests
    ]
    return found


@pytest.mark.parametrize(
    ("source", "module", "flagged"),
    [
        pytest.param(
            "from tests.proxy.pipeline.test_live_grading import metric_value",
            "tests.e2e.test_openai_sdk",
            ["tests.proxy.pipeline.test_live_grading"],
            id="absolute_import_of_a_test_module",
        ),
        pytest.param(
            "import tests.grader.test_engine",
            "tests.grader.test_api",
            ["tests.grader.test_engine"],
            id="plain_import_of_a_test_module",
        ),
        pytest.param(
            "from .test_guard import TARGETS",
            "tests.proxy.pipeline.test_fuzz_forward",
            ["tests.proxy.pipeline.test_guard"],
            id="relative_import_of_a_sibling",
        ),
        pytest.param(
            "from tests import responses_wire",
            "tests.proxy.pipeline.capture.test_responses",
            ["tests.responses_wire"],
            id="from_tests_import_a_module_that_is_not_support",
        ),
        pytest.param(
            "def test_x():\n    from tests.proxy.conftest import rows_of\n",
            "tests.e2e.test_live_page",
            ["tests.proxy.conftest"],
            id="import_inside_a_function",
        ),
        pytest.param(
            'pytest_plugins = ["tests.proxy.fixtures"]',
            "tests.conftest",
            ["tests.proxy.fixtures"],
            id="a_plugin_outside_support",
        ),
        pytest.param(
            "from tests.support.backend import Reply\nfrom tests.support import paths\n"
            'pytest_plugins = ["tests.support.fixtures"]',
            "tests.proxy.test_lifecycle",
            [],
            id="support_and_its_plugin_are_allowed",
        ),
        pytest.param(
            "from . import backend",
            "tests.support.live",
            [],
            id="support_importing_support_relatively",
        ),
    ],
)
def test_the_import_rule_flags_test_to_test_imports(
    source: str, module: str, flagged: list[str]
) -> None:
    assert imports_of_test_code(source, module) == flagged


def test_no_test_module_imports_another() -> None:
    broken = {
        module_name(path, REPO): bad
        for path in sorted(TESTS.rglob("*.py"))
        if (
            bad := imports_of_test_code(
                path.read_text(encoding="utf-8"),
                module_name(path, REPO),
                is_package=path.name == "__init__.py",
            )
        )
    }
    assert broken == {}, "import shared test code from tests.support, never from a test module"


@pytest.mark.parametrize(
    ("folders", "modules", "flagged"),
    [
        pytest.param(
            ["tests/proxy/pipeline", "proxy/pipeline"], [], [], id="a_mirror_of_a_code_folder"
        ),
        pytest.param(
            ["tests/proxy/pipelines", "proxy/pipeline"],
            [],
            ["proxy/pipelines/: no proxy/pipelines/ in the code tree"],
            id="a_folder_the_code_does_not_have",
        ),
        pytest.param(
            ["tests/e2e/agents", "tests/support/wire"], [], [], id="declared_and_support_folders"
        ),
        pytest.param(
            ["tests/support", "grader"],
            ["tests/support/test_backend.py", "tests/test_capture.py", "tests/grader/conftest.py"],
            [
                "support/: test modules in a folder that is not a suite",
                "test_capture.py: a test module at the top of tests/",
                "grader/conftest.py: a second conftest (shared fixtures: tests/support)",
            ],
            id="tests_where_none_belong",
        ),
    ],
)
def test_the_tree_rule_flags_unmirrored_folders(
    tmp_path: Path, folders: list[str], modules: list[str], flagged: list[str]
) -> None:
    for folder in folders:
        (tmp_path / folder).mkdir(parents=True)
    for module in modules:
        (tmp_path / module).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / module).write_text("")
    assert misplaced(tmp_path / "tests", tmp_path) == flagged


def test_the_test_tree_mirrors_the_code_tree() -> None:
    assert misplaced(TESTS, REPO) == [], f"declared cross-cutting folders: {sorted(CROSS_CUTTING)}"
