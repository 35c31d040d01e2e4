# fiba-stream: the `fiba` CLI in two images (multi-stage).
#
#   docker build -t fiba-stream:latest .                          # worker (last stage): no Java,
#                                                                 # no PySpark/pyarrow/pandas
#   docker build --target spark -t fiba-stream-spark:latest .     # + Java 17, [spark], [bench]
#
# Both hold the same code; the worker image installs only the core dependencies, so
# `fiba spark-join` there says which extra it needs.

FROM python:3.11-slim-bookworm AS core

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/fiba
COPY pyproject.toml README.md ./
COPY app ./app
COPY agents ./agents
COPY stores ./stores
COPY spark_bridge ./spark_bridge
COPY bench ./bench
RUN pip install .

# Unprivileged user; the worker's local state (RocksDB) lives in /data (a volume).
RUN useradd --create-home --uid 10001 fiba && mkdir /data && chown fiba /data
USER fiba
ENV FIBA_STATE_DIR=/data
VOLUME ["/data"]
EXPOSE 6066

ENTRYPOINT ["fiba"]
CMD ["worker"]

# The batch side: Java 17 for Spark (found on PATH); procps because Spark's launcher scripts
# call `ps` (man1 must exist for the JRE's update-alternatives in slim images).
FROM core AS spark
USER root
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*
RUN pip install '.[spark,bench]'
# the benchmarks are not installed (pyproject.toml): `fiba bench` finds them in /opt/fiba
ENV PYTHONPATH=/opt/fiba
USER fiba

# The default image (the last stage): the worker, small.
FROM core AS worker
