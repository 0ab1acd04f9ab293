"""A self-contained demo (backend plus driver) so the proxy can be shown without a real model."""
