"""``python -m bench <experiment> [options]``: see :mod:`bench.cli`."""

from bench.cli import bench

bench(prog_name="python -m bench")
