# syntax=docker/dockerfile:1
#
# idemgate container image.
#
#   docker build --build-arg VERSION=$(git describe --tags --always) -t idemgate .
#   docker build --target exampleapi -t idemgate-exampleapi .
#
# The last stage is the default target (the proxy). Binaries are static
# (CGO_ENABLED=0) so the runtime image needs no libc, shell or curl: the
# container HEALTHCHECK uses the binary's own `healthcheck` subcommand.

ARG GO_VERSION=1.27

# ---- build: compiles both binaries' shared module cache once -------------
FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-buildvcs=false
# go.mod/go.sum first so the dependency layer is reused while sources change.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .

# ---- idemgate-build: the proxy binary, version stamped from VERSION ------
FROM build AS idemgate-build
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=dev
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/idemgate ./cmd/idemgate

# ---- exampleapi-build: the demo upstream used by deploy/docker-compose ---
FROM build AS exampleapi-build
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=dev
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/exampleapi ./cmd/exampleapi

# ---- exampleapi: demo orders API (docker build --target exampleapi) -------
FROM gcr.io/distroless/static-debian12:nonroot AS exampleapi
COPY --from=exampleapi-build /out/exampleapi /exampleapi
# The idemgate binary rides along only as a shell-free HTTP probe for the
# compose healthcheck (`/idemgate healthcheck --url ...`).
COPY --from=idemgate-build /out/idemgate /idemgate
USER 65532:65532
EXPOSE 3000
ENTRYPOINT ["/exampleapi"]
CMD ["--listen", ":3000"]

# ---- idemgate: the proxy (default target) ----------------------------------
FROM gcr.io/distroless/static-debian12:nonroot AS idemgate
ARG VERSION=dev
LABEL org.opencontainers.image.title="idemgate" \
      org.opencontainers.image.description="HTTP idempotency-key enforcing reverse proxy" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=idemgate-build /out/idemgate /idemgate
# uid/gid 65532 is distroless "nonroot"; numeric so Kubernetes runAsNonRoot
# can verify it without an /etc/passwd lookup.
USER 65532:65532
# 8080: proxy traffic (config `listen`). 9090: admin listener (config
# `admin.listen`) with /healthz, /readyz, /metrics and the token-protected
# /admin/ — reachable by probes and Prometheus only, never published publicly.
EXPOSE 8080 9090
# No config is baked in: mount one at /etc/idemgate/config.yaml (the compose
# file and the Kubernetes ConfigMap do) so a store is always chosen on purpose.
ENTRYPOINT ["/idemgate"]
CMD ["serve", "--config", "/etc/idemgate/config.yaml"]
# The default URL is http://127.0.0.1:9090/healthz, which works whether
# admin.listen is ":9090" or "127.0.0.1:9090".
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["/idemgate", "healthcheck"]
