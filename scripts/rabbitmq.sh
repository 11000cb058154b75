#!/usr/bin/env bash
# Start/stop a private RabbitMQ (Debian package `rabbitmq-server`) with the STOMP plugin on
# 127.0.0.1:${MQBRIDGE_RABBIT_STOMP_PORT:-61623} (AMQP on 127.0.0.1:5673). State lives under
# ${MQBRIDGE_RABBIT_BASE:-.rabbitmq}. Used by the RabbitMQ tests of the STOMP adapter.
#   scripts/rabbitmq.sh install|start|stop|status
set -euo pipefail

BASE="$(realpath -m "${MQBRIDGE_RABBIT_BASE:-.rabbitmq}")"
PORT="${MQBRIDGE_RABBIT_STOMP_PORT:-61623}"
AMQP_PORT="${MQBRIDGE_RABBIT_AMQP_PORT:-5673}"
# STOMP over TLS (tests/integration/test_broker_tls.py): a listener on 127.0.0.1:MQBRIDGE_RABBIT_TLS_PORT
# with the broker's certificate and key and the CA of client certificates from MQBRIDGE_RABBIT_TLS_DIR
# (server.pem, server.key, ca.pem); a client certificate is required. A second node beside the shared
# one needs its own MQBRIDGE_RABBIT_NODE, MQBRIDGE_RABBIT_AMQP_PORT and MQBRIDGE_RABBIT_DIST_PORT.
TLS_PORT="${MQBRIDGE_RABBIT_TLS_PORT:-}"
# The management API (the bridge's backlog gauge reads it) on 127.0.0.1:MQBRIDGE_RABBIT_MGMT_PORT when set;
# off otherwise, so the shared node keeps its configuration (enabling it needs a restart).
MGMT_PORT="${MQBRIDGE_RABBIT_MGMT_PORT:-}"
export RABBITMQ_NODENAME="${MQBRIDGE_RABBIT_NODE:-mqbridge-test}@localhost"
[ -z "${MQBRIDGE_RABBIT_DIST_PORT:-}" ] || export RABBITMQ_DIST_PORT="$MQBRIDGE_RABBIT_DIST_PORT"
export RABBITMQ_CONFIG_FILE="$BASE/rabbitmq.conf"
export RABBITMQ_ENABLED_PLUGINS_FILE="$BASE/enabled_plugins"
export RABBITMQ_MNESIA_BASE="$BASE/mnesia"
export RABBITMQ_LOG_BASE="$BASE/log"
export RABBITMQ_PID_FILE="$BASE/rabbitmq.pid"

install() {
    if ! command -v rabbitmq-server >/dev/null 2>&1; then
        echo "rabbitmq: installing rabbitmq-server (apt-get)"
        export DEBIAN_FRONTEND=noninteractive
        SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
        $SUDO apt-get update -qq
        $SUDO apt-get install -y -qq rabbitmq-server >/dev/null
    fi
    # The package's own instance (if a service manager started it) would hold the ports.
    systemctl stop rabbitmq-server 2>/dev/null || true
}

write_conf() {
    mkdir -p "$BASE/mnesia" "$BASE/log"
    cat >"$RABBITMQ_CONFIG_FILE" <<CONF
listeners.tcp.default = 127.0.0.1:${AMQP_PORT}
stomp.listeners.tcp.1 = 127.0.0.1:${PORT}
loopback_users.guest = false
CONF
    if [ -n "$TLS_PORT" ]; then
        mkdir -p "$BASE/tls"
        cp "${MQBRIDGE_RABBIT_TLS_DIR:?}/server.pem" "$MQBRIDGE_RABBIT_TLS_DIR/server.key" \
            "$MQBRIDGE_RABBIT_TLS_DIR/ca.pem" "$BASE/tls/"
        chmod 0600 "$BASE/tls/server.key"
        cat >>"$RABBITMQ_CONFIG_FILE" <<CONF
stomp.listeners.ssl.1 = 127.0.0.1:${TLS_PORT}
ssl_options.cacertfile = $BASE/tls/ca.pem
ssl_options.certfile = $BASE/tls/server.pem
ssl_options.keyfile = $BASE/tls/server.key
ssl_options.verify = verify_peer
ssl_options.fail_if_no_peer_cert = true
CONF
    fi
    if [ -n "$MGMT_PORT" ]; then
        # Statistics every 500 ms (default 5 s), so a test sees a queue's depth change quickly.
        cat >>"$RABBITMQ_CONFIG_FILE" <<CONF
management.tcp.port = ${MGMT_PORT}
management.tcp.ip = 127.0.0.1
collect_statistics_interval = 500
CONF
        echo "[rabbitmq_stomp,rabbitmq_management]." >"$RABBITMQ_ENABLED_PLUGINS_FILE"
    else
        echo "[rabbitmq_stomp]." >"$RABBITMQ_ENABLED_PLUGINS_FILE"
    fi
    # Debian's rabbitmq-server drops root for the `rabbitmq` user.
    if id rabbitmq >/dev/null 2>&1; then chown -R rabbitmq:rabbitmq "$BASE"; fi
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && { [ -z "$TLS_PORT" ] || (exec 3<>"/dev/tcp/127.0.0.1/$TLS_PORT") 2>/dev/null; }; }

start() {
    if port_open; then echo "rabbitmq: STOMP on 127.0.0.1:$PORT"; return; fi
    command -v rabbitmq-server >/dev/null 2>&1 || install
    write_conf
    nohup rabbitmq-server >"$BASE/rabbitmq.out" 2>&1 &
    for _ in $(seq 1 120); do
        if port_open; then echo "rabbitmq: STOMP on 127.0.0.1:$PORT (data $BASE)"; return 0; fi
        sleep 0.5
    done
    echo "rabbitmq: STOMP port $PORT did not open; see $BASE/rabbitmq.out and $BASE/log" >&2
    tail -30 "$BASE/rabbitmq.out" >&2 || true
    return 1
}

stop() {
    rabbitmqctl stop >/dev/null 2>&1 || true
}

case "${1:-start}" in
    install) install ;;
    start) start ;;
    stop) stop ;;
    status) if port_open; then echo running; else echo stopped; exit 1; fi ;;
    *) echo "usage: $0 install|start|stop|status" >&2; exit 2 ;;
esac
