#!/bin/sh
# Local tool protocol: the request arrives on stdin; the result goes to stdout.
cat >/dev/null
printf '{"content":[{"type":"text","text":"%s"}]}\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
