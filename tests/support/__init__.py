"""Everything the test suites share, and the only test code a test module may import.

Test modules mirror the code tree (tests/grader/checks/ tests grader/checks/, ...); what more
than one of them needs lives here, one concern a module: fake servers (:mod:`.backend`,
:mod:`.plan_backend`, :mod:`.judge`), wire bodies (:mod:`.responses_wire`, :mod:`.paths`'s
recordings, the red-team answers of :mod:`.smuggling`), task sets (:mod:`.tasks`,
:mod:`.episodes`, :mod:`.surfaces`), a proxy in-process (:mod:`.proxy`, :mod:`.live`) or as a
process (:mod:`.process`), metric readers (:mod:`.metrics`), and the shared fixtures
(:mod:`.fixtures`, the plugin tests/conftest.py registers). tests/test_architecture.py enforces
the rule.
"""
