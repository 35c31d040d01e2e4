# fiba-stream: the `fiba` CLI (worker, topic creation, Spark join job) in one image.
# Python 3.11 on Debian bookworm, plus Java 17 for PySpark.
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Java 17 for Spark (found on PATH); procps because Spark's launcher scripts call `ps`.
# (man1 must exist for the JRE's update-alternatives in slim images.)
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*

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
