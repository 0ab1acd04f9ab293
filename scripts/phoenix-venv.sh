#!/usr/bin/env bash
# Builds Arize Phoenix's own virtual environment for the `phoenix` tests (issue 20): Phoenix pins
# its own OpenTelemetry, SQLAlchemy and web stack, so it never shares the project's venv; the
# test starts `phoenix serve` from it as a subprocess on loopback. Cached in .cache/phoenix-venv
# (git-ignored); a second run only checks the stamp.
#
#   scripts/phoenix-venv.sh          # build if missing or stale, print the interpreter path
#
# Environment:
#   PYTHON   the interpreter that creates the venv (default: python3)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly REPO_ROOT
readonly VENV="${REPO_ROOT}/.cache/phoenix-venv"
# Exact version: what the test reads back (its REST API's spans and span annotations, and how
# it maps a span's attributes) was checked on it.
readonly PHOENIX="arize-phoenix==20.26.1"
readonly STAMP="${VENV}/.gradeproxy-stamp"

if [ -x "${VENV}/bin/phoenix" ] && [ "$(cat "${STAMP}" 2>/dev/null)" = "${PHOENIX}" ]; then
    echo "${VENV}/bin/python"
    exit 0
fi
rm -rf "${VENV}"
"${PYTHON:-python3}" -m venv "${VENV}"
"${VENV}/bin/python" -m pip install --quiet --disable-pip-version-check "${PHOENIX}" >&2
echo "${PHOENIX}" > "${STAMP}"
echo "${VENV}/bin/python"
