"""The layout's rules hold: `lint-imports` enforces them, the layer lists name every module, no
import cycle exists anywhere in the code; the test tree mirrors the code tree, and no test
module imports another.

pyproject.toml's import-linter contracts name whole packages (``gradeproxy`` above ``proxy``
above ``grader``; grader pure; no private module imported from outside its package; acyclic
siblings) and list two sets of layers by hand: the top level of ``proxy`` and the stages of
``proxy.pipeline``. A module added there and not to its list would escape the rule silently, so
these tests keep the lists complete, run the linter itself so a broken contract fails the suite
as well as the CI step, and look for a cycle in the whole module graph (the linter's acyclic
contract compares siblings, so a cycle through a package's ``__init__`` is this test's).
"""

from __future__ import annotations

import ast
import pkgutil
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest

import proxy
import proxy.pipeline
from tests.support.paths import REPO

PACKAGES = ("gradeproxy", "grader", "proxy")


def contracts() -> list[dict[str, list[str] | str]]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    found: list[dict[str, list[str] | str]] = config["tool"]["importlinter"]["contracts"]
    return found


def layer_names(contract: dict[str, list[str] | str]) -> list[str]:
    return [name.strip() for layer in contract["layers"] for name in str(layer).split("|")]


def test_the_arrows_point_down_over_whole_packages() -> None:
    """No hand-kept module list: all of ``grader`` is below ``proxy``, all of ``proxy`` below
    the console script, and all of ``grader`` is pure."""
    top = next(c for c in contracts() if c.get("type") == "layers" and "containers" not in c)
    assert top["layers"] == ["gradeproxy", "proxy", "grader"]
    pure = next(c for c in contracts() if str(c["name"]).startswith("grader is pure"))
    assert pure["source_modules"] == ["grader"]
    assert {"aiohttp", "urllib", "socket", "mcp"} <= set(pure["forbidden_modules"])
    private = next(c for c in contracts() if c.get("type") == "private_modules")
    acyclic = next(c for c in contracts() if c.get("type") == "acyclic_siblings")
    assert set(private["packages_with_private_modules"]) == set(acyclic["ancestors"]) == {*PACKAGES}


@pytest.mark.parametrize("package", [proxy, proxy.pipeline], ids=lambda p: p.__name__)
def test_the_layers_name_every_module(package: object) -> None:
    name = getattr(package, "__name__", "")
    layers = next(c for c in contracts() if c.get("containers") == [name])
    modules = {m.name for m in pkgutil.iter_modules(getattr(package, "__path__", []))}
    assert sorted(layer_names(layers)) == sorted(modules)


def test_the_import_contracts_are_kept() -> None:
    linter = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    result = subprocess.run(
        [linter], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


def test_a_task_holds_definitions_so_grader_tasks_imports_no_check_code() -> None:
    """Issue 12: the engine builds checks and the loader validates them, never the task model."""
    contract = next(c for c in contracts() if c.get("source_modules") == ["grader.tasks"])
    forbidden = set(contract["forbidden_modules"])
    assert {"grader.checks", "grader.engine", "grader.loader"} <= forbidden


def import_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively): each is
    a set of modules that import one another, directly or not, at module level or lazily."""
    modules = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & graph.modules) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in modules:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if i < len(edges[node]):
                work.append((node, i + 1))
                nxt = edges[node][i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return sorted(found)


@pytest.mark.parametrize(
    ("files", "cycles"),
    [
        pytest.param(
            {"a.py": "from pkg import b\n", "b.py": "import pkg.c\n", "c.py": "import pkg.a\n"},
            [["pkg.a", "pkg.b", "pkg.c"]],
            id="three_modules_in_a_ring",
        ),
        pytest.param(
            {"a.py": "def f():\n    from pkg import b\n", "b.py": "from pkg.a import f\n"},
            [["pkg.a", "pkg.b"]],
            id="a_lazy_import_closes_it",
        ),
        pytest.param(
            {"__init__.py": "from pkg.sub import X\n", "sub.py": "import pkg\nX = 1\n"},
            [["pkg", "pkg.sub"]],
            id="through_the_package_init",
        ),
        pytest.param(
            {"a.py": "from pkg import b\n", "b.py": "from pkg import c\n", "c.py": ""},
            [],
            id="a_chain_is_no_cycle",
        ),
    ],
)
def test_the_cycle_finder_finds_planted_cycles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: dict[str, str], cycles: list[list[str]]
) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name, source in files.items():
        (package / name).write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_cycles(grimp.build_graph("pkg", cache_dir=None)) == cycles


def test_no_import_cycle_anywhere_in_the_code() -> None:
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    assert import_cycles(graph) == []


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


def _bench_scripts() -> set[str]:
    return {p.name for p in (REPO / "bench").glob("*.py") if not p.name.startswith("_")}


def _scenarios() -> dict[str, str]:
    """Scenario name -> script, as ``python -m bench`` lists them (run, not imported: bench/
    is a folder of scripts, not a package)."""
    listing = subprocess.run(
        [sys.executable, "-m", "bench"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    return dict(re.findall(r"^  (\S+) +(\S+\.py) ", listing, re.M))


SCENARIOS = _scenarios()


def test_every_benchmark_is_a_scenario_of_the_one_entry() -> None:
    """``python -m bench`` is the one way in: a script it does not name is one nobody finds."""
    assert set(SCENARIOS.values()) == _bench_scripts()


@pytest.mark.slow
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_benchmark_scenario_starts(scenario: str) -> None:
    """Each scenario imports and parses its arguments (a rename elsewhere breaks it here)."""
    done = subprocess.run(
        [sys.executable, "-m", "bench", scenario, "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout
