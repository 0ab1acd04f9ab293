#!/usr/bin/env bash
# Every test, from a fresh machine: a virtual environment with the project and its test
# dependencies, the CI tools (Prometheus' promtool and server, manifest validators), then
# ruff, mypy --strict and pytest. Pass pytest arguments through, e.g. `scripts/test.sh -k sse`.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${GRADEPROXY_VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet -e ".[test]"
# shellcheck source=/dev/null
. "$VENV/bin/activate"

# Prometheus (promtool + server) and the manifest validators.
scripts/install-ci-tools.sh
# BFCL's own checker for the conformance test (tests/bfcl): pinned, --no-deps.
PYTHON="$VENV/bin/python" scripts/install-bfcl.sh
# The real backend for the `realbackend` tests: llama.cpp's server with a tiny model. The first
# run compiles llama.cpp (4-8 minutes on 2 cores); later runs reuse the cached build (seconds).
# Locally, GRADEPROXY_SKIP_REAL_BACKEND=1 skips both the install and those tests.
if [ -z "${GRADEPROXY_SKIP_REAL_BACKEND:-}" ] || [ -n "${CI:-}" ]; then
    scripts/real-backend.sh install
fi

echo "== ruff"
ruff check .
ruff format --check .
echo "== mypy --strict"
mypy
echo "== lint-imports (the layout's rules: grader's core is pure)"
lint-imports
echo "== pytest"
pytest "$@"
