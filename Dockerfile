# Lush in a container: `lushctl serve`, configured by environment variables (docs/running.md).
#
#   docker build -t lush .
#   docker run --read-only --tmpfs /tmp -p 8080:8080 \
#     -v "$PWD/myproject:/project:ro" -v lush-state:/var/lib/lush \
#     -e LUSH_CONFIG=/project/gateway.yaml -e GOOGLE_API_KEY lush
#
# The project (with its kept builds in .lush/build) is mounted read-only; the state (the decision
# log and its checkpoint key, the traces, the loop scheduler's store) goes to the /var/lib/lush
# volume, which the image creates owned by its non-root user (uid 65532). Stdio MCP servers started
# with npx need Node.js: build FROM a Node.js runtime image instead of distroless to use them.
# test/container_e2e_test.go runs this configuration (ENV, USER, VOLUME, HEALTHCHECK) without docker.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/lushctl ./cmd/lushctl && mkdir -p /out/state

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/lushctl /usr/local/bin/lushctl
# The state directory exists in the image owned by nonroot: a volume mounted there starts with its
# owner (a VOLUME path the image does not create would be root's, unwritable by nonroot).
COPY --from=build --chown=65532:65532 /out/state /var/lib/lush
USER nonroot:nonroot
WORKDIR /project
# The scheduler's store defaults to the decision log's directory; the traces are kept in the state
# volume even when the decision log is a postgres:// URL (whose state directory would be the
# read-only project's .lush). The root filesystem can be read-only: only /tmp and /var/lib/lush
# are written (the Helm chart mounts emptyDirs there, deploy/helm/lush).
ENV PORT=8080 \
    LOG_LEVEL=info \
    TRACE_BACKEND=sqlite \
    LUSH_PROJECT=/project \
    LUSH_DECISION_LOG=/var/lib/lush/decisions.db \
    LUSH_TRACES_DB=/var/lib/lush/traces.db
VOLUME ["/var/lib/lush"]
EXPOSE 8080
# lushctl health asks http://127.0.0.1:$PORT/health.
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
    CMD ["/usr/local/bin/lushctl", "health"]
ENTRYPOINT ["/usr/local/bin/lushctl"]
CMD ["serve"]
