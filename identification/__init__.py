"""Friction identification experiments, processing and fitting (not built yet)."""
