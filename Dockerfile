# streameval in a container: `docker build -t streameval .`, then e.g.
#   docker run --rm streameval run --bootstrap-servers kafka:9092     (the default command: run)
#   docker run --rm -p 9464:9464 streameval demo                      (simulated traffic, by choice)
# The dependencies are the versions of constraints.txt, which CI tests, with the confluent extra
# (kafka_client = "confluent-kafka" works in the image; README, Guarantees). The user is numeric
# (10001:10001), so Kubernetes' runAsNonRoot accepts it; nothing is written at run time, so the
# root filesystem may be read-only (README, Kubernetes).
FROM python:3.11.14-slim-bookworm
WORKDIR /app
COPY pyproject.toml README.md setup.py constraints.txt ./
COPY build_backend ./build_backend
COPY streameval ./streameval
RUN pip install --no-cache-dir -c constraints.txt '.[confluent]' \
    && groupadd --system --gid 10001 streameval \
    && useradd --system --no-create-home --uid 10001 --gid 10001 streameval
USER 10001:10001
ENV PYTHONDONTWRITEBYTECODE=1
EXPOSE 9464
# /healthz answers 200 while the loop goes round (on the default metrics_port)
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=4 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9464/healthz', timeout=3)"]
ENTRYPOINT ["streameval"]
CMD ["run"]
