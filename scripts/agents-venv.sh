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

# Exact version: the test's expectations (the SDK's chat-completions wire) were checked on it.
readonly SDK="openai-agents==0.24.0"

# shellcheck source=scripts/_venv.sh
. "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
cached_venv agents-venv "${SDK}" python
