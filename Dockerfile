# streameval in a container: `docker build -t streameval .`, then e.g.
#   docker run --rm -p 9464:9464 streameval demo
#   docker run --rm streameval run --bootstrap-servers kafka:9092
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md setup.py ./
COPY build_backend ./build_backend
COPY streameval ./streameval
RUN pip install --no-cache-dir . && useradd --system --no-create-home streameval
USER streameval
EXPOSE 9464
ENTRYPOINT ["streameval"]
CMD ["demo"]
