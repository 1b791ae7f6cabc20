# The runstream image: one image for `runstream serve`, `worker` and `migrate`.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY server ./server
COPY runner ./runner
COPY stream_store ./stream_store
COPY clients ./clients
RUN pip install --no-cache-dir . && useradd --system runstream
USER runstream
EXPOSE 8000
CMD ["runstream", "serve", "--host", "0.0.0.0"]
