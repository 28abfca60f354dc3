# Dreamkeeper: `serve` (the worker plus the HTTP API, MCP and metrics), `worker` and
# `codec-server`. Used by docker-compose.yml; the serve or worker container owns /data,
# and /keyring (the key-encryption keys of a database's data keys, a volume compose
# shares between every container on the database; owned here so a new volume is too).
# tests/worker/test_container.py builds a wheel from exactly what the COPY lines below
# copy: every package folder pyproject.toml maps ([tool.setuptools.package-dir]) must be
# copied, or `pip install` fails with "package directory ... does not exist".
FROM python:3.12-slim
ENV PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY dreamkeeper dreamkeeper
COPY core core
COPY client client
COPY stores stores
COPY policies policies
COPY activities activities
COPY workflows workflows
COPY worker worker
COPY service service
COPY cli cli
COPY agent agent
# local-embeddings: the in-process embedding model (no download at run time), so hybrid
# search works as under `dreamkeeper dev` when no DREAMKEEPER_EMBEDDING_BASE_URL is set.
RUN pip install --no-cache-dir ".[local-embeddings]" \
    && useradd --create-home --uid 1000 dreamkeeper \
    && mkdir /data /keyring && chown dreamkeeper /data /keyring
USER dreamkeeper
ENV DREAMKEEPER_DATA=/data
VOLUME ["/data"]
# serve's default port (it binds 127.0.0.1 unless told --host 0.0.0.0) and the codec server's.
EXPOSE 8780 8081
ENTRYPOINT ["dreamkeeper"]
CMD ["serve", "--host", "0.0.0.0"]
