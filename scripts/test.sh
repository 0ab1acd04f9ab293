#!/usr/bin/env bash
# Every test, from a fresh machine: a virtual environment with the project and its test
# dependencies, the CI tools (Prometheus' promtool and server, manifest validators), then
# ruff, mypy --strict and pytest. Pass pytest arguments through, e.g. `scripts/test.sh -k sse`.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each stage prints how long it took (CI's budget is 30 minutes; see where it goes).
STAGE_NAME="" STAGE_START=$SECONDS
stage() {
    if [ -n "$STAGE_NAME" ]; then
        printf '== %s took %ss\n' "$STAGE_NAME" "$((SECONDS - STAGE_START))"
    fi
    STAGE_NAME="$1" STAGE_START=$SECONDS
    [ -z "$1" ] || printf '== %s\n' "$1"
}
trap 'stage ""' EXIT

stage "environment (.venv, the project and its test dependencies)"

VENV="${GRADEPROXY_VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet -e ".[test]"
# shellcheck source=/dev/null
. "$VENV/bin/activate"

stage "CI tools (Prometheus, chromium, manifest validators)"
scripts/install-ci-tools.sh
stage "BFCL's checker (pinned, --no-deps)"
PYTHON="$VENV/bin/python" scripts/install-bfcl.sh
# Arize Phoenix for the `phoenix` tests, in a venv of its own (its pins are not ours); cached
# in .cache/phoenix-venv after the first build (3-4 minutes on 2 cores, then a stamp check).
stage "Arize Phoenix (its own venv, cached)"
scripts/phoenix-venv.sh >/dev/null
# The real backend for the `realbackend` tests: llama.cpp's server with a tiny model. The first
# run compiles llama.cpp (4-8 minutes on 2 cores); later runs reuse the cached build (seconds).
# Locally, GRADEPROXY_SKIP_REAL_BACKEND=1 skips both the install and those tests.
if [ -z "${GRADEPROXY_SKIP_REAL_BACKEND:-}" ] || [ -n "${CI:-}" ]; then
    stage "real backend (llama.cpp server, cached after the first build)"
    scripts/real-backend.sh install
fi

stage "ruff"
ruff check .
ruff format --check .
stage "mypy --strict"
mypy
stage "lint-imports (the layout's rules: arrows point down, no cycles, grader pure)"
lint-imports
# The OTLP exporter's tests once more, against the newest OpenTelemetry SDK release (the project
# pins the tested minor range): a venv of its own with only the SDK packages, cached by a stamp.
stage "OTLP exporter against the newest OpenTelemetry SDK (its own venv, cached)"
OTEL_NEWEST="$(VENV="$VENV" scripts/otel-newest-venv.sh)"
"$OTEL_NEWEST" -m pytest -q -p no:cacheprovider tests/proxy/telemetry/test_otlp.py \
    tests/proxy/telemetry/test_otlp_http.py tests/proxy/telemetry/test_export.py
stage "pytest (on every core: pytest-xdist)"
pytest -n "${PYTEST_WORKERS:-auto}" "$@"
