#!/usr/bin/env bash
# Builds the OpenAI Agents SDK's own virtual environment for tests/support/billing_agent.py (issue 17): the SDK
# pins openai and mcp, so it never shares the project's venv; the test drives it as a
# subprocess. Cached in .cache/agents-venv (git-ignored); a second run only checks the stamp.
#
#   scripts/agents-venv.sh          # build if missing or stale, print the interpreter path
#
# Environment:
#   PYTHON   the interpreter that creates the venv (default: python3)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly REPO_ROOT
readonly VENV="${REPO_ROOT}/.cache/agents-venv"
# Exact version: the test's expectations (the SDK's chat-completions wire) were checked on it.
readonly SDK="openai-agents==0.24.0"
readonly STAMP="${VENV}/.gradeproxy-stamp"

if [ -x "${VENV}/bin/python" ] && [ "$(cat "${STAMP}" 2>/dev/null)" = "${SDK}" ]; then
    echo "${VENV}/bin/python"
    exit 0
fi
rm -rf "${VENV}"
"${PYTHON:-python3}" -m venv "${VENV}"
"${VENV}/bin/python" -m pip install --quiet --disable-pip-version-check "${SDK}" >&2
echo "${SDK}" > "${STAMP}"
echo "${VENV}/bin/python"
