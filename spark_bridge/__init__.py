"""The Spark bridge: fiba-stream's output topics as Spark DataFrames, and the as-of join job.

- ``schema``: Spark schemas of the aggregates and answers topics (from ``agents.records``);
- ``source``: the ``fiba-kafka`` Python data source (batch and streaming), over ``kafka``
  (offsets from the Fetch high watermark), ``offsets`` and ``decode`` (JSON -> Arrow);
- ``jvm``: the same rows from Spark's own Kafka connector (``decode`` via ``mapInArrow``) and
  the connector's option mapping; ``connector``: its jars, from Maven Central, cached;
- ``read``: ``read_aggregates`` / ``read_answers`` (engine choice), ``flatten_window``;
- ``join``: the as-of join job; ``cli``: ``fiba spark-join`` / ``fiba spark-read``;
  ``__main__``: the join job as a script (``python -m spark_bridge``, ``spark-submit``);
- ``session``, ``progress``: session set-up and a progress bar of Spark's stages.
"""
