"""Record: where a graded answer ends up — Prometheus metrics, result rows, the inspector's ring."""
