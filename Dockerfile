FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    HOOKRELAY_HOST=0.0.0.0 HOOKRELAY_DATA_DIR=/data

RUN useradd --create-home --uid 10001 hookrelay && mkdir /data && chown hookrelay /data
WORKDIR /app
COPY pyproject.toml README.md schema.sql ./
COPY outbox ./outbox
COPY service ./service
# The only network use at build time: installing the package and its dependencies.
RUN pip install --no-cache-dir . && rm -rf /root/.cache

USER hookrelay
VOLUME /data
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s CMD python -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)" || exit 1
ENTRYPOINT ["hookrelay"]
CMD ["serve"]
