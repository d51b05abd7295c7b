#!/bin/sh
# Tells nats-server to reload when its TLS files change. cert-manager renews the server
# certificate (and may roll the CA) in place, in the mounted Secret, but a running nats-server
# keeps what it read at start until it gets a reload signal; without one it would present an
# expired certificate to every client that (re)connects. Runs as a sidecar in the server's pod
# (shareProcessNamespace: the server's pid file names a process it can signal, same user).
# TLS_DIR, PID_FILE and INTERVAL (seconds) are for tests; the defaults are the pod's paths.
set -u
TLS_DIR="${TLS_DIR:-/etc/nats/tls}"
PID_FILE="${PID_FILE:-/var/run/nats/nats.pid}"
INTERVAL="${INTERVAL:-30}"

digest() {
  cat "$TLS_DIR/tls.crt" "$TLS_DIR/tls.key" "$TLS_DIR/ca.crt" 2>/dev/null | md5sum
}

seen="$(digest)"
while :; do
  sleep "$INTERVAL"
  now="$(digest)"
  [ "$now" = "$seen" ] && continue
  if nats-server --signal "reload=$PID_FILE"; then
    echo "reload-tls: TLS files changed; nats-server reloaded"
    seen="$now"
  else
    echo "reload-tls: TLS files changed but the reload signal failed; trying again" >&2
  fi
done
