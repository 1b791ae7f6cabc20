# The runstream image: one image for `runstream serve`, `worker` and `migrate`.
FROM python:3.11-slim
WORKDIR /app
# The locked versions (requirements/lock.txt, checked against their hashes) in a layer of their
# own, then runstream itself, built by the locked hatchling.
COPY requirements/lock.txt ./requirements/lock.txt
RUN pip install --no-cache-dir --require-hashes -r requirements/lock.txt
COPY pyproject.toml README.md ./
COPY server ./server
COPY runner ./runner
COPY stream_store ./stream_store
COPY clients ./clients
RUN pip install --no-cache-dir --no-deps --no-build-isolation . && useradd --system runstream
USER runstream
EXPOSE 8000
CMD ["runstream", "serve", "--host", "0.0.0.0"]
