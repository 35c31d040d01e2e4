"""Range queries -> answers, over the query topic and over HTTP.

A query asks for the aggregates of one key's retained events with ``from <= t <= to`` (or one
configured ``window`` at stream time), answered from the same per-key FiBA as the windows: one
range query, O(log n). The modules, by job: ``parsing`` (a record or HTTP parameters -> a
``RangeQuery``, or ``BadQuery``), ``service`` (one query -> one answer, ``QueryService``),
``latency`` (the producer without linger and the fetch wait of the query clients),
``forwarding`` (HTTP queries about keys another worker owns, through Kafka), ``consumer`` (the
query partitions of the owned input partitions, read beside Faust's consumer) and ``hooks``
(all of it in a Faust worker: the consumer following the assignment, ``GET /windows/{key}``
and ``GET /stats``). Reference: docs/reference/http.md.
"""
