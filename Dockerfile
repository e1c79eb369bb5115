# Lush in a container: `lushctl serve`, configured by environment variables (docs/running.md).
#
#   docker build -t lush .
#   docker run --read-only --tmpfs /tmp -p 8080:8080 \
#     -v "$PWD/myproject:/project:ro" -v lush-state:/var/lib/lush \
#     -e LUSH_CONFIG=/project/gateway.yaml -e GOOGLE_API_KEY lush
#
# The project (with its kept builds in .lush/build) is mounted read-only; the decision log and the
# traces go to the writable /var/lib/lush volume. Stdio MCP servers started with npx need Node.js:
# build FROM a Node.js runtime image instead of distroless to use them.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/lushctl ./cmd/lushctl

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/lushctl /usr/local/bin/lushctl
USER nonroot:nonroot
WORKDIR /project
ENV PORT=8080 \
    LOG_LEVEL=info \
    TRACE_BACKEND=sqlite \
    LUSH_PROJECT=/project \
    LUSH_DECISION_LOG=/var/lib/lush/decisions.db \
    LUSH_TRACES_DB=/var/lib/lush/traces.db
VOLUME ["/var/lib/lush"]
EXPOSE 8080
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
    CMD ["/usr/local/bin/lushctl", "health", "--url", "http://127.0.0.1:8080/health"]
ENTRYPOINT ["/usr/local/bin/lushctl"]
CMD ["serve"]
