#!/usr/bin/env bash
# The main job from a fresh machine: install, then run the live demo (proxy + demo backend +
# sample traffic through the official openai SDK + a scoreboard read from /metrics), and keep
# serving. Arguments go to `gradeproxy demo` (e.g. --exit, --port 9000).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${GRADEPROXY_VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet -e ".[demo]"
exec "$VENV/bin/gradeproxy" demo "$@"
