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

if [ -x scripts/install-ci-tools.sh ]; then
    scripts/install-ci-tools.sh
fi

echo "== ruff"
ruff check .
ruff format --check .
echo "== mypy --strict"
mypy
echo "== pytest"
pytest "$@"
