"""The exception classes a package defines, for the tests that keep its drawn tree honest."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable
from types import ModuleType


def defined_exceptions(
    package: ModuleType, skip: Callable[[str], bool]
) -> dict[str, type[BaseException]]:
    """Every public exception class defined in ``package``'s modules (``skip`` names modules
    not to import), by name."""
    found: dict[str, type[BaseException]] = {}
    for module_info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
        if skip(module_info.name):
            continue
        module = importlib.import_module(module_info.name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
                and not name.startswith("_")
            ):
                found[name] = value
    return found
