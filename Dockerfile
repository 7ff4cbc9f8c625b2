# syntax=docker/dockerfile:1

# The production image (the last stage, built by default) holds leadintake's
# three commands: api (also `api migrate` and the operator commands), worker,
# and leadintake (the client's command line). The command picks one:
#
#   docker build -t leadintake .
#   docker run --rm leadintake api -h
#   docker run --rm -e DATABASE_URL=... leadintake api migrate
#   docker run --rm -e DATABASE_URL=... -e ENRICHMENT_URL=... leadintake worker
#
# The demo's stand-in for enrichment, CRM and notification (fakedownstream)
# is never in it: it is an image of its own, the demo target, which
# docker-compose.yml builds for its fake service:
#
#   docker build --target demo -t leadintake-demo .
#
# docker-compose.yml runs the whole system with both.

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
    go build -trimpath -ldflags="-s -w" -o /out/ ./cmd/api ./cmd/worker ./cmd/leadintake

# --- build-demo: the fake downstream, for the demo image only ---
FROM build AS build-demo
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags="-s -w" -o /demo/ ./cmd/fakedownstream

# --- demo: the fake downstream alone (FAKE_ADDR, 9090), for the demo ---
FROM gcr.io/distroless/static-debian12:nonroot AS demo
COPY --from=build-demo /demo/fakedownstream /usr/local/bin/
ENV PATH=/usr/local/bin:/usr/bin:/bin
USER nonroot:nonroot
EXPOSE 9090
CMD ["fakedownstream"]

# --- runtime, the production image: no shell, no package manager, a
# non-root user (65532) ---
FROM gcr.io/distroless/static-debian12:nonroot AS runtime
COPY --from=build /out/api /out/worker /out/leadintake /usr/local/bin/
ENV PATH=/usr/local/bin:/usr/bin:/bin
USER nonroot:nonroot
# api: API_ADDR (default :8080) and ADMIN_ADDR (8081); worker: ADMIN_ADDR
# (8082). Both admin listeners default to 127.0.0.1 inside the container:
# set ADMIN_ADDR=0.0.0.0:PORT to publish one.
EXPOSE 8080 8081 8082
# Stop with SIGTERM (the default): both processes drain within
# SHUTDOWN_TIMEOUT; give the container at least that long to stop.
CMD ["api"]
