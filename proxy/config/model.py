"""The config's sections: frozen dataclasses, one per top-level key, with their defaults.

A description of what can be configured and nothing else: reading the file and the environment
and checking one section against another live in ``proxy.config.load``. ``routes`` and the
``shadow`` blocks are structured (a list, nested mappings) and come from the file or from
``overrides`` only; ``GRADEPROXY_*`` variables override scalar fields.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from proxy.config.coerce import plain
from proxy.config.keys import InboundKey, resolve_keys
from proxy.config.tracing import Tracing

ENV_PREFIX = "GRADEPROXY_"


@dataclass(frozen=True, slots=True)
class Listen:
    host: str = "127.0.0.1"
    port: int = 8080
    # Server processes sharing the port (SO_REUSEPORT; docs/operations.md#workers). 1: this
    # process serves, as without the setting; N > 1: a supervisor starts N and watches them.
    workers: int = 1


@dataclass(frozen=True, slots=True)
class Admin:
    port: int | None = None  # serve /metrics, /livez, /readyz on their own port
    host: str | None = None  # default: listen.host


# The upstream client (docs/operations.md, "The upstream client"): the proxy's own HTTP/1.1
# client, or aiohttp's ClientSession (any route that goes through a forward proxy uses it).
ClientKind = Literal["fast", "aiohttp"]


@dataclass(frozen=True, slots=True)
class Tls:
    """How an https upstream is checked, and how the proxy proves itself to it (mTLS)."""

    ca_file: Path | None = None  # a PEM bundle trusted instead of the system's CAs
    cert_file: Path | None = None  # the client certificate (PEM), for an upstream that asks
    key_file: Path | None = None  # its private key (PEM); unset: the key is in cert_file
    verify: bool = True  # false: no certificate check at all (a test rig, never production)


@dataclass(frozen=True, slots=True)
class Shadow:
    """A candidate upstream that gets a copy of sampled graded requests (docs/shadow.md)."""

    url: str = ""
    api_key_env: str | None = None  # unset: no Authorization (the client's is never sent)
    model: str | None = None  # rewrite `model` in the shadow's copy of the request body
    sample_rate: float = 1.0  # of the requests that are graded (same sampling key)
    max_concurrency: int = 8  # shadow requests in flight at once; more are skipped, not queued
    timeout_s: float = 60.0  # the whole shadow exchange, read to its last byte
    stream: Literal["same", "never"] = "same"  # never: ask for a plain JSON body
    allow_non_v1_path: bool = False  # url's path does not end in /v1, on purpose
    client: ClientKind | None = None  # unset: upstream.client
    tls: Tls = field(default_factory=Tls)


@dataclass(frozen=True, slots=True)
class Upstream:
    url: str = ""
    api_key_env: str | None = None
    connect_timeout_s: float = 10.0
    idle_timeout_s: float = 300.0  # between two reads of the upstream body; no total timeout
    shadow: Shadow | None = None
    allow_non_v1_path: bool = False  # url's path does not end in /v1, on purpose
    client: ClientKind = "fast"  # the default of every route and shadow that names none
    # HTTP(S)_PROXY / NO_PROXY apply (aiohttp's trust_env); off, so a deployment that has
    # them set for other tools keeps going direct. A proxied upstream uses the aiohttp client.
    trust_env: bool = False
    # Connections open at once to one origin (host, port, scheme), per process; 0: no cap.
    # A request past the cap waits for one, within connect_timeout_s.
    max_connections_per_origin: int = 0
    tls: Tls = field(default_factory=Tls)
    # The client's own credentials, never sent upstream when the proxy injects its key (an
    # api_key_env, here or on the route); Authorization is always replaced then.
    strip_client_credentials: tuple[str, ...] = ("api-key", "X-Api-Key", "Cookie")


@dataclass(frozen=True, slots=True)
class Route:
    """Requests whose body's ``model`` matches ``match`` (an fnmatch glob) go to ``url``."""

    match: str = ""
    url: str = ""
    api_key_env: str | None = None
    connect_timeout_s: float = 10.0
    idle_timeout_s: float = 300.0
    shadow: Shadow | None = None
    allow_non_v1_path: bool = False
    client: ClientKind | None = None  # unset: upstream.client
    tls: Tls = field(default_factory=Tls)


@dataclass(frozen=True, slots=True)
class Tasks:
    path: Path | None = None
    watch: bool = False
    watch_interval_s: float = 2.0
    # A task set that fails to load at start stops `serve` (exit 1) unless this is true: then
    # the proxy forwards ungraded and /readyz says why until a reload succeeds.
    allow_start_without: bool = False


@dataclass(frozen=True, slots=True)
class Pricing:
    """The optional price table (grader/pricing.py), reloaded with the tasks on SIGHUP."""

    path: Path | None = None


@dataclass(frozen=True, slots=True)
class Enforce:
    """Route policies (docs/enforce.md): enforce rules by model and API, needing no task
    header; reloaded with the tasks (SIGHUP, ``tasks.watch``)."""

    path: Path | None = None


@dataclass(frozen=True, slots=True)
class Grading:
    task_header: str = "X-Grade-Task"
    run_header: str = "X-Grade-Run"
    # The row's ``sample_id`` (joins live rows to offline ones and to run metadata).
    sample_id_header: str = "X-Grade-Sample-Id"
    meta_header_prefix: str = "X-Grade-Meta-"
    queue_size: int = 10000
    workers: int = 2
    sample_rate: float = 1.0
    # The sampling key of both grading and shadow sampling: this header (e.g. a conversation
    # id) when the request has it, else the request id.
    sampling_header: str | None = None
    inline_max_bytes: int = 16384  # larger responses are graded off the event loop
    # Where off-loop grading runs: a grading process (no GIL shared with the event loop) or a
    # thread of the proxy's process (docs/operations.md, "How grading runs").
    isolation: Literal["process", "thread"] = "process"
    batch_max: int = 64  # jobs a worker takes off the queue at once (one message to the process)
    # While jobs keep arriving, a worker waits this long for more to join a batch (queue.py).
    batch_window_s: float = 0.04
    pair_max_pending: int = 10000  # shadow pairs waiting for their second leg
    pair_ttl_s: float = 900.0  # how long a pair waits for its second leg
    # Jobs waiting while none was taken off the queue for this long: grading is stuck.
    stuck_after_s: float = 30.0
    # The grading process holding one job longer than this is killed and restarted; the job
    # counts as a grading error (kind="grader_deadline"). docs/operations.md, "A hung grading
    # process".
    job_deadline_s: float = 20.0
    # Agent episodes (docs/episodes.md): the header that ties turns into one episode (its
    # value is the episode id), the role, and the header that marks the last turn.
    episode_header: str = "X-Grade-Episode"
    role_header: str = "X-Grade-Role"
    # Whether a client's role_header is believed (it can turn policy authority_ok true): off,
    # the role is the task's record's or item's; on only where clients are trusted to say it.
    trust_role_header: bool = False
    episode_end_header: str = "X-Grade-Episode-End"
    episode_max_turns: int = 200
    episode_max_calls: int = 1000
    episode_max_bytes: int = 8 * 1024 * 1024
    # Ask a streamed chat answer for its usage when the client did not, and take the added
    # chunk out of the client's stream (proxy/pipeline/streamusage.py).
    request_usage: bool = False


@dataclass(frozen=True, slots=True)
class Results:
    path: Path | None = Path("results/grades.jsonl")
    max_bytes: int = 100 * 1024 * 1024
    backups: int = 5
    # What a row keeps of the answer (and a capture row of the prompt): keep the text, hash it
    # (``sha256:<hex>``: rows join without customer text), or drop it. ``capture_answer`` is
    # its deprecated alias (true: keep, false: drop), resolved into ``answer`` at load.
    answer: Literal["keep", "hash", "drop"] = "keep"
    capture_answer: bool | None = None
    # Untagged requests on the graded routes written as ``kind: "capture"`` rows, sampled at
    # this rate by the grading sampling key (grader/capture.py; docs/review.md).
    capture_untagged: float = 0.0
    # The one cap on the answer a row stores (``truncated: true`` beyond it); grading reads all.
    max_answer_chars: int = 65536
    # The shared rows database (docs/rows-database.md): a postgresql:// URL without its
    # password (from ``sink_password_env`` or ``sink_password_file``). Set, rows go there
    # instead of ``path``, through ``spill_path`` whenever the database cannot take them.
    sink: str | None = None
    sink_password_env: str | None = None
    sink_password_file: Path | None = None
    spill_path: Path = Path("results/spill.jsonl")
    sink_batch_rows: int = 500
    sink_buffer_bytes: int = 16 * 1024 * 1024  # rows waiting for the database; past it: spill
    sink_retry_s: float = 2.0
    sink_timeout_s: float = 5.0  # connect and statement timeout

    @property
    def keeps_answer(self) -> bool:
        """Whether rows store the answer's text (``answer: keep``)."""
        return self.answer == "keep"


@dataclass(frozen=True, slots=True)
class Limits:
    max_body_bytes: int = 64 * 1024 * 1024  # a declared larger Content-Length: 413 at once
    max_capture_bytes: int = 16 * 1024 * 1024  # decoded response bytes kept for grading


@dataclass(frozen=True, slots=True)
class Client:
    """Client-side timeouts (nginx's client_header_timeout, client_body_timeout and
    keepalive_timeout), enforced by one watchdog over all connections
    (proxy/pipeline/watchdog.py)."""

    header_timeout_s: float = 60.0  # first byte of a request to the end of its headers
    body_timeout_s: float = 60.0  # between two reads of a request body (never the response)
    idle_timeout_s: float = 60.0  # a connection with no request in progress


@dataclass(frozen=True, slots=True)
class AuthKey:
    """A named inbound key (proxy/config/keys.py): its id goes in rows and metric labels."""

    id: str = ""
    secret_env: str | None = None  # a variable holding the secret
    secret_file: Path | None = None  # or a file holding it (read at start and on SIGHUP)
    rpm: int | None = None  # requests per minute, per process (proxy/pipeline/limits.py)
    tpm: int | None = None  # tokens per minute, per process


@dataclass(frozen=True, slots=True)
class Auth:
    """Inbound client keys (docs/operations.md#inbound-keys); off while neither ``keys`` nor
    ``keys_env`` is set."""

    keys: tuple[AuthKey, ...] = ()  # named keys
    keys_env: str | None = None  # names a variable holding comma-separated (unnamed) keys
    protect_metrics: bool = True  # /metrics needs a key too (/livez and /readyz never do)


@dataclass(frozen=True, slots=True)
class Shutdown:
    drain_delay_s: float = 5.0
    grace_period_s: float = 60.0


@dataclass(frozen=True, slots=True)
class Metrics:
    models: tuple[str, ...] = ()  # allow-list of model label values; others become "other"
    max_models: int = 20  # without an allow-list: first N models seen, then "other"
    max_keys: int = 50  # the `key` label: the first N named keys seen, then "other"


@dataclass(frozen=True, slots=True)
class Logging:
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["json", "console"] = "json"


@dataclass(frozen=True, slots=True)
class Server:
    """How ``serve`` runs (proxy/eventloop.py): auto takes uvloop when it is installed."""

    event_loop: Literal["auto", "asyncio", "uvloop"] = "auto"


@dataclass(frozen=True, slots=True)
class Judge:
    """The LLM judge for ``label_model``/``score_model`` checks (off the hot path, like all)."""

    endpoint: str | None = None  # an OpenAI-compatible base URL ending in /v1
    model: str | None = None  # pinned default for checks that name none (no `latest` aliases)
    api_key_env: str | None = None
    timeout_s: float = 30.0
    max_concurrency: int = 4
    retries: int = 2
    allow_non_v1_path: bool = False  # endpoint's path does not end in /v1, on purpose


@dataclass(frozen=True, slots=True)
class Scoring:
    """The scoring HTTP routes under /grading/v1 (docs/scoring.md); off by default."""

    enabled: bool = False
    max_batch: int = 1000
    on_admin_port: bool = False  # serve /grading/v1 on admin.port, not the traffic port


@dataclass(frozen=True, slots=True)
class Ui:
    """The live page at /ui (docs/operations.md#the-live-page)."""

    # Failing and stale answers kept in memory for the inspector, per process; 0: none.
    failure_ring_size: int = 100


@dataclass(frozen=True, slots=True)
class Review:
    """The review queue at /ui/review (docs/review.md)."""

    # Task drafts (``gradeproxy tasks draft --out``) offered for review; None: none.
    drafts_path: Path | None = None
    # Share of judge-graded rows offered for review, by a hash of their row_id (0..1).
    judged_sample: float = 0.1
    # The newest items from result rows the queue keeps (in memory, per process).
    max_items: int = 10000


@dataclass(frozen=True, slots=True)
class Config:
    listen: Listen = field(default_factory=Listen)
    admin: Admin = field(default_factory=Admin)
    upstream: Upstream = field(default_factory=Upstream)
    routes: tuple[Route, ...] = ()
    tasks: Tasks = field(default_factory=Tasks)
    pricing: Pricing = field(default_factory=Pricing)
    enforce: Enforce = field(default_factory=Enforce)
    grading: Grading = field(default_factory=Grading)
    results: Results = field(default_factory=Results)
    limits: Limits = field(default_factory=Limits)
    client: Client = field(default_factory=Client)
    auth: Auth = field(default_factory=Auth)
    shutdown: Shutdown = field(default_factory=Shutdown)
    metrics: Metrics = field(default_factory=Metrics)
    logging: Logging = field(default_factory=Logging)
    server: Server = field(default_factory=Server)
    judge: Judge = field(default_factory=Judge)
    scoring: Scoring = field(default_factory=Scoring)
    ui: Ui = field(default_factory=Ui)
    review: Review = field(default_factory=Review)
    tracing: Tracing = field(default_factory=Tracing)  # OpenTelemetry export (docs/tracing.md)

    def upstream_api_key(self) -> str | None:
        """The upstream key from the environment variable the config names, if any."""
        name = self.upstream.api_key_env
        return os.environ.get(name) if name else None

    def inbound_keys(self, environ: Mapping[str, str] | None = None) -> tuple[InboundKey, ...]:
        """The inbound keys (``auth.keys``, then ``auth.keys_env``'s), their secrets read now;
        empty: no inbound auth. Raises ConfigError as validation does."""
        return resolve_keys(self.auth, environ)

    def inbound_secrets(self, environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
        """The inbound keys' secrets, as a client sends them."""
        return tuple(key.secret.decode("utf-8") for key in self.inbound_keys(environ))

    def redacted(self) -> dict[str, Any]:
        """The effective config for the start-up log line: names of secrets, never values."""
        data: dict[str, Any] = plain(self)
        return data
