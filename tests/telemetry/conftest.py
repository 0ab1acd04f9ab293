"""The proxy tests' fixtures (a scripted backend on loopback, the task file) for these tests."""

from tests.proxy.conftest import _quiet_logs, backend, backend_server, results_path, tasks_file

__all__ = ["_quiet_logs", "backend", "backend_server", "results_path", "tasks_file"]
