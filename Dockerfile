FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    HOOKRELAY_HOST=0.0.0.0 HOOKRELAY_PORT=8000 HOOKRELAY_DATA_DIR=/data

# The embedded PostgreSQL runs as this user too: never as root (see README, "Containers").
RUN useradd --create-home --uid 10001 hookrelay && mkdir /data && chown hookrelay /data
WORKDIR /app
COPY pyproject.toml README.md schema.sql ./
COPY client ./client
COPY outbox ./outbox
COPY service ./service
# The only network use at build time: the two distributions (hookrelay-client, then
# hookrelay-server, which depends on it) and their runtime dependencies (no test extras).
RUN pip install --no-cache-dir ./client . && rm -rf /root/.cache

USER hookrelay
VOLUME /data
# 8000: the API (serve, api). 9464: a `dispatch` container's /metrics, /healthz, /readyz
# (HOOKRELAY_METRICS_PORT).
EXPOSE 8000 9464
# Ready = the database answers (/readyz), not merely the process being up. A `dispatch`
# container answers on HOOKRELAY_METRICS_PORT instead: compose.yaml points its check there.
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/readyz' % os.environ.get('HOOKRELAY_PORT', '8000'), timeout=2)"]
# SIGTERM (docker stop): stop accepting, drain the dispatcher, stop the embedded server, exit 0.
STOPSIGNAL SIGTERM
ENTRYPOINT ["hookrelay"]
CMD ["serve"]
