# The operator image built without pulling anything (images/build-local.sh): the base is a
# distroless-style root (the binary's shared libraries from `ldd`, CA certificates, /etc/passwd
# with nonroot 65532, /tmp) `docker import`ed; the build context holds just the binary.
ARG BASE=edgecache-base/cc-nonroot:local
FROM ${BASE}
# --- runtime stage (keep identical to operator.Dockerfile) ---
LABEL org.opencontainers.image.title="edgecache-operator" \
      org.opencontainers.image.description="EdgeCache operator: reconciles EdgeCache resources into data-plane DaemonSets" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY edgecache-operator /usr/local/bin/edgecache-operator
USER 65532:65532
WORKDIR /
EXPOSE 8080/tcp
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/edgecache-operator"]
CMD ["run"]
