"""The worker runs without the batch side: every module of ``app``, ``agents`` and ``stores``
imports, and a worker builds, with PySpark, pyarrow, pandas and matplotlib unavailable (the
``[spark]`` and ``[bench]`` extras not installed)."""

import subprocess
import sys
import textwrap

BATCH_SIDE = ("pyspark", "pyarrow", "pandas", "matplotlib")


def test_the_worker_imports_and_builds_without_the_batch_side(tmp_path):
    code = textwrap.dedent(
        f"""
        import importlib, pkgutil, sys
        for name in {BATCH_SIDE!r}:
            sys.modules[name] = None  # `import name` raises ImportError
        import app, agents, stores
        for package in (app, agents, stores):
            for module in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
                importlib.import_module(module.name)
        from app.settings import load_settings
        from app.worker import build_worker
        build_worker(load_settings(overrides={{"state_dir": {str(tmp_path)!r}}}, environ={{}}))
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in {BATCH_SIDE!r})
        assert not [m for m in loaded if sys.modules[m] is not None], loaded
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]


def test_a_batch_command_without_its_extra_is_one_clear_line():
    code = textwrap.dedent(
        """
        import sys
        sys.modules["pyspark"] = None
        from app.cli import main
        sys.argv = ["fiba", "spark-read", "--help"]
        main()
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1, done.stderr
    assert "pip install 'fiba-stream[spark]'" in done.stderr
