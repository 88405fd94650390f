"""Benchmarks and the soak run: ``python -m bench NAME``, from the repository root.

See bench/__main__.py for how benchmarks are found, and docs/operations/benchmarks.md
for the figures.
"""
