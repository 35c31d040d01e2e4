"""The as-of join job as a script, with the options of ``fiba spark-join``:
``python -m spark_bridge --batch ...`` or ``spark-submit ... spark_bridge/__main__.py --batch ...``.

Kept apart from ``spark_bridge.join`` (the job itself) so that the job does not import the CLI
that imports it.
"""

from spark_bridge.cli import spark_join

if __name__ == "__main__":
    spark_join(prog_name="python -m spark_bridge")
