# The data-plane image: edgecache-dataplane on a Debian 12 slim base. Build from the repo root:
#   docker build -f images/dataplane.Dockerfile -t edgecache-dataplane:0.1.0 .
# The binary embeds its eBPF program (compiled by clang from C at build time), and uses io_uring
# through raw syscalls: at run time it needs glibc and libgcc only, which the slim base has.
# images/dataplane.local.Dockerfile is the same runtime stage for machines that cannot pull
# images (images/build-local.sh); a test keeps the two runtime stages identical.

FROM rust:1.95-bookworm AS builder
RUN apt-get update \
    && apt-get install -y --no-install-recommends clang libbpf-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p edgecache-dataplane \
    && install -D -s -m 0755 "${CARGO_TARGET_DIR:-target}/release/edgecache-dataplane" /out/edgecache-dataplane

FROM debian:bookworm-slim
# --- runtime stage (keep identical to dataplane.local.Dockerfile) ---
LABEL org.opencontainers.image.title="edgecache-dataplane" \
      org.opencontainers.image.description="EdgeCache data plane: HTTP cache on NVMe with io_uring and eBPF connection steering" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /out/edgecache-dataplane /usr/local/bin/edgecache-dataplane
# Root in the container: the `capabilities` security mode adds BPF, NET_ADMIN, IPC_LOCK and
# SYS_RESOURCE to uid 0 and drops the rest; the cache hostPath is owned by root on the node.
USER 0:0
WORKDIR /
EXPOSE 8080/tcp 9090/tcp
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/edgecache-dataplane"]
CMD ["serve", "--config", "/etc/edgecache/config.yaml"]
