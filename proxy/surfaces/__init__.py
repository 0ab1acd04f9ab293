"""What the proxy serves besides ``/v1``: the scoring routes and the live page.

``scoring_http`` is the ``/grading/v1`` API (off by default), ``ui`` the ``/ui`` page.
"""
