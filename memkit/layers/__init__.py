"""The memory layers, each in a home of its own, all written once over the backend contract."""
