"""The request pipeline, one module (or subpackage) a stage, in request order.

``guard`` (target hygiene, inbound keys, trace headers, the body read; ``tracecontext`` and the
client ``watchdog`` beside it) → ``admit`` (graded or not: the skip reasons) → ``route`` (which
upstream) → ``forward`` (the byte-for-byte relay over ``upstream``, the keep-alive client that
also times out idle upstream reads; ``decoding`` makes the capture copy, ``rawhead`` writes a
head with the upstream's bytes) →
``capture`` (parse the copy into answers: ``sse``, ``accumulate``, ``chat``, ``responses``;
``delivered`` says whether the client got it whole) → ``grade`` (one grade job through
``grader.engine``; ``episodes`` for agent episodes) → ``record`` (``metrics``, ``results``,
``failures``, the per-request ``access`` record) → ``queue`` (bounded, off the hot path: it runs
the grade stage and hands the rows to record; its ``ledger`` counts what a killed worker left
unsettled); ``malformed`` logs and counts the requests aiohttp refuses before any stage runs. A
stage imports earlier stages, never a later one: pyproject.toml's ``layers`` contract, checked
by ``lint-imports`` in CI. ``proxy/handler.py``
composes them.
"""
