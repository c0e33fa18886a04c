"""The version of stepahead that is running: the installed distribution's."""
from __future__ import annotations


def installed_version() -> str:
    """The installed distribution's version (pyproject.toml's), or "unknown" when the
    package is run from a checkout that was never installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("stepahead")
    except PackageNotFoundError:
        return "unknown"
