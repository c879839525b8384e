# The cursor-byok server as a container image (docs/deploy.md).
#
#   docker build -t cursor-byok .
#
# The first stage builds the project's wheel and collects every dependency as a wheel; the
# image installs those into a venv with no index and keeps neither the source tree nor a
# compiler. It runs as the unprivileged user `cursor-byok` (uid 10001): the configuration is
# read from the volume /etc/cursor-byok, the database lives in the volume /var/lib/cursor-byok.
#
# The image serves SQLite and PostgreSQL: it installs the `postgres` extra (psycopg).
#
# PYTHON_IMAGE is any Debian-based image with python3 >= 3.11 and its venv module (the
# official slim image by default; scripts/container_image.sh passes a local Debian root).
# PIP_INDEX_URL, PIP_FIND_LINKS and PIP_NO_INDEX reach pip in the first stage only (a mirror,
# or a local wheelhouse for a build without network).
ARG PYTHON_IMAGE=python:3.12-slim-bookworm

FROM ${PYTHON_IMAGE} AS wheels
ARG PIP_INDEX_URL
ARG PIP_FIND_LINKS
ARG PIP_NO_INDEX
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY src ./src
RUN python3 -m venv /opt/build \
 && /opt/build/bin/pip wheel --wheel-dir /wheels '.[postgres]'

FROM ${PYTHON_IMAGE}
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN groupadd --system --gid 10001 cursor-byok \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/cursor-byok \
      --no-create-home --shell /usr/sbin/nologin cursor-byok \
 && install -d -o cursor-byok -g cursor-byok -m 0750 /var/lib/cursor-byok \
 && install -d -m 0755 /etc/cursor-byok
COPY --from=wheels /wheels /tmp/wheels
RUN python3 -m venv /opt/cursor-byok \
 && /opt/cursor-byok/bin/pip install --no-index --find-links /tmp/wheels 'cursor-byok[postgres]' \
 && rm -rf /tmp/wheels
COPY deploy/healthcheck.py /opt/cursor-byok/healthcheck.py
ENV PATH=/opt/cursor-byok/bin:$PATH \
    CURSOR_BYOK_CONFIG=/etc/cursor-byok/config.toml \
    HOME=/var/lib/cursor-byok \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER 10001:10001
WORKDIR /var/lib/cursor-byok
VOLUME ["/etc/cursor-byok", "/var/lib/cursor-byok"]
EXPOSE 8700
# /healthz answers 200 once the server is ready; no token needed. Set CURSOR_BYOK_HEALTH_URL
# when the server listens elsewhere (another port, or https with server.certificate).
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python3", "/opt/cursor-byok/healthcheck.py"]
ENTRYPOINT ["cursor-byok"]
CMD ["serve"]
