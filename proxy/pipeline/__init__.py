"""The request pipeline, one module a stage, in request order.

``guard`` (target hygiene, inbound keys, trace headers, the body read; ``tracecontext`` and the
client ``watchdog`` beside it) → ``route`` (which upstream) → ``forward`` (the byte-for-byte relay;
``decoding`` makes the capture copy) → ``capture`` (parse the copy into answers: ``sse``, ``chat``,
``responses``) → ``grade`` (one grade job through ``grader.engine``; ``episodes`` for agent
episodes) → ``queue`` (bounded, off the hot path) → ``record`` (``metrics``, ``results``,
``failures``). A stage imports earlier stages' types, never a later stage.
"""
