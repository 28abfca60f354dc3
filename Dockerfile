# The Dreamkeeper worker. Used by docker-compose.yml; owns the /data volume.
FROM python:3.12-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY stores stores
COPY policies policies
COPY activities activities
COPY workflows workflows
COPY worker worker
COPY agent agent
RUN pip install --no-cache-dir . && useradd --create-home --uid 1000 dreamkeeper \
    && mkdir /data && chown dreamkeeper /data
USER dreamkeeper
ENV DREAMKEEPER_DATA=/data
VOLUME ["/data"]
ENTRYPOINT ["dreamkeeper"]
CMD ["worker"]
