# The data-plane image built without pulling anything (images/build-local.sh): the base is a
# Debian 12 minbase root made by debootstrap and `docker import`ed, the binary is the one cargo
# built on this machine (the build context holds just that file).
ARG BASE=edgecache-base/bookworm-minbase:local
FROM ${BASE}
# --- runtime stage (keep identical to dataplane.Dockerfile) ---
LABEL org.opencontainers.image.title="edgecache-dataplane" \
      org.opencontainers.image.description="EdgeCache data plane: HTTP cache on NVMe with io_uring and eBPF connection steering" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY edgecache-dataplane /usr/local/bin/edgecache-dataplane
# Root in the container: the `capabilities` security mode adds BPF, NET_ADMIN, IPC_LOCK and
# SYS_RESOURCE to uid 0 and drops the rest; the cache hostPath is owned by root on the node.
USER 0:0
WORKDIR /
EXPOSE 8080/tcp 9090/tcp
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/edgecache-dataplane"]
CMD ["serve", "--config", "/etc/edgecache/config.yaml"]
