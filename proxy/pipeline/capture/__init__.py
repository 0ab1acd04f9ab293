"""Capture: a copy of the relayed bytes parsed into answers, after the client has them.

``sse`` decodes event streams incrementally, ``accumulate`` holds what both APIs share (the exact
JSON reader, wire tool calls, chat's delta merging, ``CaptureError``), ``chat`` and ``responses``
turn Chat Completions and Responses API bodies into the answer shape the grader reads, and
``delivered`` says whether a relayed response reached its client whole.
"""
