"""Enforce mode (docs/enforce.md): act on a deterministic verdict before the client acts.

::

    decision.py   Decision, Enforced, CallJudge: the interface of both paths
    judge.py      the request's plan (task entry + route policies) and its CallJudge
    answer.py     enforce_body: a non-streamed chat completion or Responses body
    stream.py     StreamEnforcer: the streamed hold-back (SSE)

Nothing here runs for a request that no ``enforce`` entry or route policy covers: ``off`` is
today's relay, byte for byte.
"""
