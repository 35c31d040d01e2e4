"""The brokers the project starts itself, for the CLI (``fiba broker``), the demo and the tests.

``process``: the child process both kinds share; ``tansu``: the embedded one, in memory;
``apache_kafka``: Apache Kafka (KRaft, log on disk) with its jars (``kafka_jars``) and an
optional SASL listener (``kafka_sasl``); ``kinds``: the kinds by name. Reference:
docs/reference/operations.md.
"""
