"""A backend module whose driver is not installed: the registry must turn this into a pip hint."""

import surely_not_installed_driver  # type: ignore[import-not-found]  # noqa: F401
