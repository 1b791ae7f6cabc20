"""Clients of the runstream HTTP API (the Python client lands with issue 3)."""
