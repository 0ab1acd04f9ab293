"""Capture: a copy of the relayed bytes parsed into answers, after the client has them.

``sse`` decodes event streams incrementally, ``accumulate`` merges streamed deltas, ``chat`` and
``responses`` turn Chat Completions and Responses API bodies into the answer shape the grader reads.
"""
