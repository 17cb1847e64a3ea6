"""Benchmarks of the script runners: ``python -m bench`` (see bench/__main__.py)."""
