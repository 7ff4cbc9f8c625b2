# syntax=docker/dockerfile:1

# One image holds all three binaries: api (also `api migrate`), worker and
# fakedownstream (the demo's stand-in for enrichment, CRM and notification).
# The command picks one:
#
#   docker build -t leadintake .
#   docker run --rm leadintake api -h
#   docker run --rm -e DATABASE_URL=... leadintake api migrate
#   docker run --rm -e DATABASE_URL=... -e ENRICHMENT_URL=... leadintake worker
#
# docker-compose.yml runs the whole system with it.

# --- build: static binaries, no cgo, no local paths in them ---
# The same Go as the Makefile (GOTOOLCHAIN): its standard library fixes reach
# the binaries.
FROM golang:1.27.3-bookworm AS build
WORKDIR /src
ENV CGO_ENABLED=0
# Modules first, so that a source change does not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags="-s -w" -o /out/ ./cmd/api ./cmd/worker ./cmd/fakedownstream

# --- runtime: no shell, no package manager, a non-root user (65532) ---
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/api /out/worker /out/fakedownstream /usr/local/bin/
ENV PATH=/usr/local/bin:/usr/bin:/bin
USER nonroot:nonroot
# api: API_ADDR (default :8080) and ADMIN_ADDR (8081); worker: ADMIN_ADDR
# (8082); fakedownstream: FAKE_ADDR (9090). Both admin listeners default to
# 127.0.0.1 inside the container: set ADMIN_ADDR=0.0.0.0:PORT to publish one.
EXPOSE 8080 8081 8082 9090
# Stop with SIGTERM (the default): both processes drain within
# SHUTDOWN_TIMEOUT; give the container at least that long to stop.
CMD ["api"]
