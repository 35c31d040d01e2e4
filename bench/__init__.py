"""Benchmark suite of the sliding-window aggregators: ``python -m bench <experiment>``.

See :mod:`bench.cli` for the command, :mod:`bench.experiments` for the experiments and
``bench/RESULTS.md`` for the figures of the last full run.
"""
