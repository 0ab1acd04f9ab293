"""The ``tls`` blocks of ``upstream``, ``routes[]`` and their shadows, made into SSL contexts.

Built once at load to check them (a missing file, a key that does not match its certificate,
a bundle that is not PEM: each an error naming the field), and again by the upstream clients
at start. It must never fall back silently: an unusable ``tls`` block stops the start.
"""

from __future__ import annotations

import ssl

from proxy.config.coerce import ConfigError
from proxy.config.model import Tls

__all__ = ["DEFAULT_TLS", "ssl_context"]

DEFAULT_TLS = Tls()


def ssl_context(where: str, tls: Tls) -> ssl.SSLContext | None:
    """The context for an https upstream, or None for the default block (the system's CAs,
    no client certificate): the clients' own default context then serves it."""
    if tls == DEFAULT_TLS:
        return None
    if tls.key_file is not None and tls.cert_file is None:
        raise ConfigError(f"{where}.key_file: needs cert_file (the certificate it belongs to)")
    if not tls.verify and tls.ca_file is not None:
        raise ConfigError(f"{where}.ca_file: has no use with verify: false")
    try:
        context = ssl.create_default_context(cafile=tls.ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"{where}.ca_file: cannot load {tls.ca_file}: {_why(exc)}") from None
    if not tls.verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if tls.cert_file is not None:
        try:
            context.load_cert_chain(tls.cert_file, tls.key_file)
        except (OSError, ssl.SSLError) as exc:
            what = f"{tls.cert_file}" + (f" with {tls.key_file}" if tls.key_file else "")
            raise ConfigError(f"{where}.cert_file: cannot load {what}: {_why(exc)}") from None
    return context


def _why(exc: OSError | ssl.SSLError) -> str:
    if isinstance(exc, ssl.SSLError):
        return exc.reason or str(exc)
    return exc.strerror or str(exc)
