"""Helpers shared by the embedded backends (memory://, sqlite://)."""
