"""The proxy's configuration: one YAML file, ``GRADEPROXY_*`` environment overrides, CLI flags.

Precedence, lowest first: defaults, the file, the environment, command-line flags. Unknown keys
are errors, and every error names the field (``upstream.url: must be an http(s) URL``,
``routes[1].shadow.sample_rate: must be within 0..1``), so a bad config fails at start and
never half-applies. Secrets appear only as environment variable *names* (``api_key_env``);
their values are read at start and never logged.

``model`` holds the sections (frozen dataclasses), ``load`` reads and validates them,
``coerce`` turns mappings into sections with errors naming the field, ``urls`` is the
base-URL rule, ``tls`` makes the ``tls`` blocks SSL contexts, ``yamlpos`` finds a
field's line, ``schema`` exports the JSON Schema.
"""

from proxy.config.coerce import ConfigError
from proxy.config.load import load_config
from proxy.config.model import (
    Admin,
    Auth,
    Client,
    Config,
    Enforce,
    Grading,
    Judge,
    Limits,
    Listen,
    Logging,
    Metrics,
    Pricing,
    Results,
    Route,
    Scoring,
    Server,
    Shadow,
    Shutdown,
    Tasks,
    Tls,
    Ui,
    Upstream,
)
from proxy.config.tracing import Tracing
from proxy.config.urls import url_warnings

__all__ = [
    "Admin",
    "Auth",
    "Client",
    "Config",
    "ConfigError",
    "Enforce",
    "Grading",
    "Judge",
    "Limits",
    "Listen",
    "Logging",
    "Metrics",
    "Pricing",
    "Results",
    "Route",
    "Scoring",
    "Server",
    "Shadow",
    "Shutdown",
    "Tasks",
    "Tls",
    "Tracing",
    "Ui",
    "Upstream",
    "load_config",
    "url_warnings",
]
