"""Shadow evaluation: a sampled copy of graded traffic sent to a second upstream, and the pairing.

``runner`` starts and reads the shadow leg without ever touching the primary; ``pairs`` matches
the two legs' grades by ``pair_id`` (docs/shadow.md).
"""
