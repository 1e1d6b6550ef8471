"""Pydantic models of the wire format: the single source of truth for request and response shapes."""
