"""What each config field means: the one source of the descriptions in ``gradeproxy config-schema``.

Kept beside the dataclasses rather than in a document so that the schema editors read, the
generated ``docs/configuration.md`` and the code cannot drift: a test fails when a field has no
description here, or a description names no field. Keyed by dataclass name, then field name.
"""

from __future__ import annotations

from typing import Final

FIELDS: Final[dict[str, dict[str, str]]] = {
    "Config": {
        "listen": "where the proxy listens",
        "admin": "an optional second port for `/metrics`, `/livez`, `/readyz` and `/ui`",
        "upstream": "the default backend",
        "routes": (
            "backends picked by a glob on the request's `model` (the first match wins; none: "
            "`upstream`)"
        ),
        "tasks": "the task set that tagged requests are graded against",
        "pricing": "an optional price table: `cost` in rows and `gradeproxy_cost_total`",
        "enforce": "route policies: act on tool calls before clients get them (docs/enforce.md)",
        "grading": "how and where answers are graded",
        "results": "where result rows go",
        "limits": "size bounds on requests and captured answers",
        "client": "timeouts for slow or idle clients",
        "auth": "inbound keys",
        "shutdown": "how SIGTERM drains",
        "metrics": "bounds on metric labels",
        "logging": "log level and format",
        "server": "the event loop",
        "judge": "the LLM judge for `label_model`/`score_model` checks",
        "scoring": "the HTTP scoring routes (docs/scoring.md)",
        "ui": "the live page `/ui`",
        "review": "the review queue `/ui/review`: drafts and judged rows labelled by people",
        "tracing": "OpenTelemetry export (docs/tracing.md)",
    },
    "Listen": {
        "host": "address to listen on",
        "port": "port (0: any free port)",
        "workers": (
            "server processes sharing the port (`--workers`, `GRADEPROXY_LISTEN_WORKERS`); 1 is "
            "the single process; N > 1 needs a fixed `admin.port`: worker *i* serves `/metrics`, "
            "`/readyz` and `/ui` on `admin.port + i` and writes `grades.w<i>.jsonl` "
            "(docs/operations.md, Workers)"
        ),
    },
    "Admin": {
        "port": "serve `/metrics`, `/livez`, `/readyz` on their own port instead",
        "host": "address for the admin port",
    },
    "Upstream": {
        "strip_client_credentials": (
            "with an injected key (`api_key_env`), the client's headers of these names are not "
            "forwarded (docs/operations.md, client credentials)"
        ),
        "client": (
            "the upstream client of every route and shadow that names none: `fast` (the "
            "proxy's own HTTP/1.1 client) or `aiohttp` (aiohttp's ClientSession)"
        ),
        "trust_env": (
            "`HTTP_PROXY`/`HTTPS_PROXY`/`NO_PROXY` apply (off: a deployment that sets them for "
            "other tools keeps going direct); a proxied upstream uses the aiohttp client"
        ),
        "max_connections_per_origin": (
            "connections open at once to one origin, per process (0: no cap); a request past "
            "the cap waits for one within `connect_timeout_s`, counted"
        ),
        "tls": "how an https upstream is checked, and the client certificate for mTLS",
        "url": (
            "required: the backend's OpenAI base URL, ending in `/v1`; the client's path "
            "after `/v1` is appended; credentials, a query or a fragment in it are refused "
            "at load (no request would carry them: the key goes in `api_key_env`)"
        ),
        "api_key_env": (
            "environment variable holding the upstream key; set, it replaces the client's "
            "`Authorization`; unset, the client's is forwarded. A named variable that is missing "
            "stops the start"
        ),
        "connect_timeout_s": "TCP connect timeout → 504",
        "idle_timeout_s": (
            "longest wait for the response headers or between two reads of the body; there is no "
            "total timeout, so long streams are never cut"
        ),
        "shadow": (
            "a candidate upstream that gets a copy of sampled graded requests (docs/shadow.md)"
        ),
        "allow_non_v1_path": "`true`: `url`'s path does not end in `/v1` on purpose (no warning)",
    },
    "Shadow": {
        "client": "the shadow's upstream client (`fast` or `aiohttp`); unset: `upstream.client`",
        "tls": "how an https upstream is checked, and the client certificate for mTLS",
        "url": "the candidate backend's OpenAI base URL, ending in `/v1`",
        "api_key_env": "its key's variable; the client's credentials are never sent to a shadow",
        "model": (
            "rewrites `model` in the shadow's copy of the body (the only body ever re-serialised,"
            " and never the primary's)"
        ),
        "sample_rate": (
            "share of graded requests copied (same hash, same decision on every replica)"
        ),
        "max_concurrency": "shadow requests in flight; more are skipped and counted, never queued",
        "timeout_s": "the whole shadow exchange",
        "stream": "`same` streams when the primary does; `never` asks for a JSON body",
        "allow_non_v1_path": "`true`: `url`'s path does not end in `/v1` on purpose (no warning)",
    },
    "Route": {
        "client": "this route's upstream client (`fast` or `aiohttp`); unset: `upstream.client`",
        "tls": "how an https upstream is checked, and the client certificate for mTLS",
        "match": (
            "a glob on the request's `model`; the first route that matches wins, none: `upstream`"
        ),
        "url": "this route's backend base URL, ending in `/v1`",
        "api_key_env": "as `upstream.api_key_env`, for this route",
        "connect_timeout_s": "as `upstream.connect_timeout_s`, for this route",
        "idle_timeout_s": "as `upstream.idle_timeout_s`, for this route",
        "shadow": "this route's shadow (as `upstream.shadow`)",
        "allow_non_v1_path": "as `upstream.allow_non_v1_path`, for this route",
    },
    "Tasks": {
        "path": "task file or folder; unset, nothing is graded and `/readyz` is ready at once",
        "watch": "reload when task files change (SIGHUP always reloads)",
        "watch_interval_s": "polling interval for `watch`",
        "allow_start_without": (
            "a task set that fails to load at start stops `serve` (exit 1, one line naming "
            "`file:line`); `true` starts anyway, forwarding ungraded, with `/readyz` ready and "
            "its `tasks_error` saying why"
        ),
    },
    "Pricing": {
        "path": (
            "a YAML price table (per model: `input`, `output`, optional `cached_input`, per "
            "million tokens; config/pricing/example.yaml), read at start and reloaded with the "
            "tasks (SIGHUP, `tasks.watch`); a bad table fails start and a reload keeps the old "
            "one; unset, rows carry `cost: null`"
        ),
    },
    "Enforce": {
        "path": (
            "a YAML route-policy file (docs/enforce.md): per model glob and API, the "
            "deterministic checks that observe, block or strip tool calls with no task header; "
            "read at start and reloaded with the tasks (SIGHUP, `tasks.watch`); a bad file fails "
            "start (unless `tasks.allow_start_without`) and a reload keeps the old policies; "
            "unset, only tasks' own `enforce` entries act"
        ),
    },
    "Grading": {
        "trust_role_header": (
            "believe a client's `role_header`; off, the role is the episode record's or "
            "`item.role` (docs/operations.md, the role header)"
        ),
        "job_deadline_s": (
            "the grading process holding one job this long is killed and restarted; the job "
            'counts as `grading_errors_total{kind="grader_deadline"}` (docs/operations.md)'
        ),
        "task_header": "request header naming the task",
        "run_header": "optional run id copied into result rows",
        "sample_id_header": (
            "optional sample id copied into the row's `sample_id` (joins live rows to offline "
            "ones and to run metadata; never forwarded)"
        ),
        "meta_header_prefix": "`X-Grade-Meta-<key>: value` headers land in the row's `meta`",
        "queue_size": "grade queue bound; a full queue drops the job and counts `queue_full`",
        "workers": "grade workers (asyncio tasks)",
        "sample_rate": (
            "share of tagged requests graded, decided by a hash of the sampling key (same "
            "decision on every replica)"
        ),
        "sampling_header": (
            "header to hash for sampling (e.g. a conversation id); default: the request id"
        ),
        "inline_max_bytes": (
            "responses up to this size whose task runs only cheap checks are graded inline; the "
            "rest off the event loop (`grading.isolation`)"
        ),
        "isolation": (
            "where off-loop grading runs: `process` (a grading process beside the proxy, fed in "
            "batches; no GIL shared with the event loop) or `thread` (a thread of the proxy's "
            'process). docs/operations.md, "How grading runs"'
        ),
        "batch_max": (
            "jobs a grade worker takes off the queue at once (one message to the grading process)"
        ),
        "batch_window_s": (
            "while jobs keep arriving, how long a worker waits for more to join its batch (0: "
            "never); after a quiet spell the first job is taken at once"
        ),
        "pair_max_pending": "shadow pairs waiting for their second leg (overflow is counted)",
        "pair_ttl_s": "how long a pair waits for its second leg",
        "stuck_after_s": (
            "jobs waiting while none was taken off the queue this long: grading is *stuck* "
            "(`/healthz/grading` 503, `gradeproxy_grading_healthy` 0)"
        ),
        "episode_header": (
            "ties the turns of an agent episode; its value is the row's `episode_id` "
            "(docs/episodes.md)"
        ),
        "role_header": (
            "the episode's role for `authority_ok` (wins over the record's and `item.role`)"
        ),
        "episode_end_header": "`true` marks the turn that ends an episode even when it calls tools",
        "episode_max_turns": (
            "turns per episode; over it the episode is skipped (`episode_limit`) and counted"
        ),
        "episode_max_calls": (
            "tool calls per episode; over it the episode is skipped (`episode_limit`) and counted"
        ),
        "episode_max_bytes": (
            "bytes of history per episode; over it the episode is skipped (`episode_limit`) and "
            "counted"
        ),
        "request_usage": (
            "add `stream_options.include_usage` to streamed chat requests that did not ask for "
            "it (rows, token metrics and `tpm` get the usage) and take the added usage chunk out "
            "of the client's stream, so its bytes are unchanged"
        ),
    },
    "Results": {
        "sink": (
            "a PostgreSQL URL without a password: every replica's rows in one table, instead of "
            "`path`; spilled to `spill_path` and backfilled through outages "
            "(docs/rows-database.md)"
        ),
        "sink_password_env": "the variable holding the sink's password (never logged)",
        "sink_password_file": "a file holding the sink's password (a mounted Secret)",
        "spill_path": (
            "where rows wait while the database cannot take them; never truncated while it "
            "holds unwritten rows (one per worker with `--workers`)"
        ),
        "sink_batch_rows": "rows written to the database in one batch",
        "sink_buffer_bytes": "rows waiting in memory for the database; past it they spill",
        "sink_retry_s": "how often a spilling sink tries the database again",
        "sink_timeout_s": "connect and statement timeout of the sink's database calls",
        "path": (
            "result rows (JSONL, flushed per batch); `null` disables; with `listen.workers` N > 1"
            " one file per worker: `grades.w0.jsonl` … `grades.w<N-1>.jsonl`, each rotated on its"
            " own"
        ),
        "max_bytes": "rotate at this size (`grades.jsonl.1`, `.2`, …)",
        "backups": "rotated files kept",
        "answer": (
            "what a row keeps of the answer (a capture row: of the prompt too): `keep` the text,"
            " `hash` it (`sha256:<hex>`, rows join without customer text) or `drop` it"
        ),
        "capture_answer": (
            "deprecated alias of `answer` (`true`: keep, `false`: drop); a warning at load, an"
            " error beside `answer`"
        ),
        "capture_untagged": (
            "rate 0..1 at which requests without a task header on the graded routes are written"
            " as `kind: capture` rows (sampled by the grading sampling key; needs `path` or"
            " `sink`; docs/review.md)"
        ),
        "max_answer_chars": (
            "the one cap on the answer a row stores; a longer one is cut and the row says "
            "`truncated: true` (grading always reads the whole answer)"
        ),
    },
    "Limits": {
        "max_body_bytes": (
            "largest request body; larger gets 413, at once (before reading) when "
            "`Content-Length` declares it"
        ),
        "max_capture_bytes": (
            "most decoded response bytes kept for grading; past it the copy is cut (the response "
            "is relayed whole, as sent) and the response counts as a `capture` grading error"
        ),
    },
    "Client": {
        "header_timeout_s": (
            "first byte of a request to the end of its headers (trickling does not extend it) → "
            "408, connection closed"
        ),
        "body_timeout_s": (
            "longest silence between two reads of a request body → 408; responses, streamed or "
            "not, are never timed"
        ),
        "idle_timeout_s": "a connection with no request in progress (new, or kept alive) is closed",
    },
    "Auth": {
        "keys": (
            "named inbound keys, each `id`, `secret_env` or `secret_file`, optional `rpm` and "
            "`tpm`: the `id` is the rows' `key_id` and the metrics' `key` label; secrets read at "
            "start and on SIGHUP"
        ),
        "keys_env": (
            "variable holding comma-separated inbound keys; set, every request needs one "
            "(`X-Gradeproxy-Key` or `Authorization: Bearer`), else 401; the header that carried "
            "it is never forwarded"
        ),
        "protect_metrics": "`/metrics` needs a key too (`/livez` and `/readyz` never do)",
    },
    "Shutdown": {
        "drain_delay_s": "after SIGTERM, `/readyz` says 503 but traffic is served this long",
        "grace_period_s": "then in-flight requests and streams get this long to finish",
    },
    "Metrics": {
        "models": "allow-list for the `model` label (others: `other`)",
        "max_models": "without an allow-list: the first N models seen, then `other`",
        "max_keys": "the `key` label: the first N named inbound keys seen, then `other`",
    },
    "Logging": {
        "level": "`debug`, `info` (one canonical JSON line per request), `warning`, `error`",
        "format": "`json` (stdout, one object a line) or `console`",
    },
    "Server": {
        "event_loop": (
            "`auto` (uvloop when the `gradeproxy[uvloop]` extra is installed, else asyncio's "
            "loop), `asyncio`, or `uvloop` (start-up fails in one line when it is not installed);"
            " `serve --loop` overrides it"
        ),
    },
    "Judge": {
        "endpoint": (
            "OpenAI-compatible base URL of the LLM judge; unset, judge checks are infrastructure "
            "errors"
        ),
        "model": "pinned default judge model (`latest` aliases are refused)",
        "api_key_env": "the judge key's variable",
        "timeout_s": "seconds per judge call",
        "max_concurrency": "judge calls in flight",
        "retries": (
            "retries of a call whose reply is not exactly `PASS`/`FAIL`; then the column is left "
            "ungraded (an infrastructure error)"
        ),
        "allow_non_v1_path": (
            "`true`: `endpoint`'s path does not end in `/v1` on purpose (no warning)"
        ),
    },
    "Scoring": {
        "enabled": "serve the scoring routes under `/grading/v1`",
        "max_batch": "largest batch `POST /grading/v1/score` accepts",
        "on_admin_port": (
            "serve the scoring routes on `admin.port` (required) instead of the traffic port"
        ),
    },
    "Ui": {
        "failure_ring_size": (
            "failing and stale answers the `/ui` inspector keeps in memory, per process (0: none;"
            " empty anyway unless `results.answer` is `keep`)"
        ),
    },
    "Review": {
        "drafts_path": (
            "task drafts (`gradeproxy tasks draft --out`) the review queue offers; unset: none"
        ),
        "judged_sample": (
            "share of judge-graded rows the review queue offers (0..1, a hash of `row_id`: the"
            " same rows on every worker); judge parse errors and advisory rows are all offered"
        ),
        "max_items": (
            "the newest items from result rows the review queue keeps in memory, per process"
        ),
    },
    "Tracing": {
        "enabled": (
            "export one trace per request over OTLP/HTTP (needs the `otel` extra; docs/tracing.md)"
        ),
        "sample_ratio": (
            "share of the traces the proxy starts that are exported (trace-id hash, same on every"
            " replica); a valid client `traceparent` decides by its sampled flag"
        ),
        "service_name": "`service.name`; unset: `OTEL_SERVICE_NAME`, else `gradeproxy`",
        "endpoint": (
            "OTLP base URL (`/v1/traces`, `/v1/logs` added); unset: the `OTEL_EXPORTER_OTLP_*` "
            "variables, else `http://localhost:4318`"
        ),
        "provider_name": "`gen_ai.provider.name` of the upstream call",
        "capture_content": (
            "prompts and answers on the call span (`gen_ai.input.messages`, "
            "`gen_ai.output.messages`; answers only with `results.answer: keep`)"
        ),
        "max_content_chars": "each captured text cut here",
        "evaluation_events": (
            "`span`: evaluation results as span events (Phoenix, Langfuse, Tempo, Jaeger, "
            "Datadog); `log`: as OTLP log records parented to the call span"
        ),
        "phoenix_url": (
            "an Arize Phoenix base URL: evaluation results are also written as its span "
            "annotations (its evaluations panel), after their spans; `PHOENIX_API_KEY` is sent as"
            " a bearer token when set"
        ),
        "max_queue_size": (
            "finished requests waiting for export; more are dropped and counted (`queue_full`)"
        ),
        "max_export_batch_size": "spans per export request",
        "schedule_delay_s": "the longest a span waits for its batch",
        "export_timeout_s": (
            "one export request with its retries; unset: `OTEL_EXPORTER_OTLP_TIMEOUT`, else 10 s"
        ),
        "shutdown_timeout_s": (
            "the most shutdown waits for the last batches; the rest is counted (`shutdown`)"
        ),
    },
    "AuthKey": {
        "id": (
            "the key's name in rows (`key_id`) and metric labels (`key`): letters, digits, "
            "`. _ : -`, at most 64; `none` and `other` are reserved"
        ),
        "secret_env": "a variable holding the secret (give this or `secret_file`)",
        "secret_file": (
            "a file holding the secret (surrounding whitespace dropped), read at start and on "
            "SIGHUP; a reload that cannot read it keeps the keys in use"
        ),
        "rpm": (
            "requests per minute, per process (a sliding minute); over it: 429 "
            "`rate_limit_exceeded` with `Retry-After`; unset: no limit"
        ),
        "tpm": (
            "tokens per minute (input + output as responses reported them), per process: once "
            "spent, the next request gets a 429 with `Retry-After`; unset: no limit"
        ),
    },
    "Tls": {
        "ca_file": "a PEM bundle trusted instead of the system's CAs",
        "cert_file": "the client certificate (PEM), for an upstream that asks for one",
        "key_file": "its private key (PEM); unset: the key is in `cert_file`",
        "verify": "`false`: no certificate check at all (a test rig, never production)",
    },
}
