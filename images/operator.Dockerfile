# The operator image: edgecache-operator on distroless cc (glibc, libgcc, CA certificates, no
# shell), as the non-root user 65532. Build from the repo root:
#   docker build -f images/operator.Dockerfile -t edgecache-operator:0.1.0 .
# images/operator.local.Dockerfile is the same runtime stage for machines that cannot pull
# images (images/build-local.sh); a test keeps the two runtime stages identical.

FROM rust:1.95-bookworm AS builder
# The same builder as the data plane's (clang and libbpf-dev build the workspace's eBPF object),
# so one cached builder layer serves both images.
RUN apt-get update \
    && apt-get install -y --no-install-recommends clang libbpf-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p edgecache-operator \
    && install -D -s -m 0755 "${CARGO_TARGET_DIR:-target}/release/edgecache-operator" /out/edgecache-operator

FROM gcr.io/distroless/cc-debian12:nonroot
# --- runtime stage (keep identical to operator.local.Dockerfile) ---
LABEL org.opencontainers.image.title="edgecache-operator" \
      org.opencontainers.image.description="EdgeCache operator: reconciles EdgeCache resources into data-plane DaemonSets" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /out/edgecache-operator /usr/local/bin/edgecache-operator
USER 65532:65532
WORKDIR /
EXPOSE 8080/tcp
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/edgecache-operator"]
CMD ["run"]
