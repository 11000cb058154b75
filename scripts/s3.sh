#!/usr/bin/env bash
# Start/stop a real S3-compatible server for the tests of s3a:// warehouses: S3Proxy (org.gaul:s3proxy,
# its jar-with-dependencies from Maven Central) on its file-system backend (jclouds `filesystem`),
# plain HTTP on 127.0.0.1:${MQBRIDGE_S3_PORT:-9000}, path-style buckets, AWS signatures v2 and v4.
# State lives under ${MQBRIDGE_S3_BASE:-.s3proxy}: the buckets (data/, one directory each), the server's
# properties, its log and pid file, and `credentials` (access_key=…, secret_key=…: made on the first
# start, 0600, kept across restarts). The secret is only in those two 0600 files, never on a command
# line. Buckets and objects survive a restart.
#   scripts/s3.sh install|start|stop|status
set -euo pipefail
cd "$(dirname "$0")/.."

BASE="$(realpath -m "${MQBRIDGE_S3_BASE:-.s3proxy}")"
PORT="${MQBRIDGE_S3_PORT:-9000}"
VERSION=4.1.0
JAR="jars/s3proxy/s3proxy-$VERSION-jar-with-dependencies.jar"
PIDFILE="$BASE/s3proxy.pid"
START_TIMEOUT_S=60

install() {
    [ -f "$JAR" ] && return 0
    if ! command -v mvn >/dev/null 2>&1; then
        echo "s3: installing maven (apt-get)"
        SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq maven >/dev/null
    fi
    local log
    log="$(mktemp)"
    mkdir -p "$(dirname "$JAR")"
    if ! mvn -q dependency:copy -Dartifact="org.gaul:s3proxy:$VERSION:jar:jar-with-dependencies" \
            -DoutputDirectory="$(realpath "$(dirname "$JAR")")" >"$log" 2>&1; then
        cat "$log" >&2
        rm -f "$log"
        echo "s3: could not fetch org.gaul:s3proxy:$VERSION (jar-with-dependencies) with mvn" >&2
        return 1
    fi
    rm -f "$log"
    echo "s3: S3Proxy $VERSION -> $JAR"
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; }
alive() { [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

write_conf() {
    mkdir -p "$BASE/data"
    chmod 0700 "$BASE"
    umask 077
    if [ ! -s "$BASE/credentials" ]; then
        # A fixed-length key id and a random secret, as S3 issues them (20 and 40 characters).
        printf 'access_key=MQB%s\nsecret_key=%s\n' \
            "$(head -c 64 /dev/urandom | tr -dc 'A-Z0-9' | head -c 17)" \
            "$(head -c 256 /dev/urandom | tr -dc 'A-Za-z0-9' | head -c 40)" >"$BASE/credentials"
    fi
    local access secret
    access="$(sed -n 's/^access_key=//p' "$BASE/credentials")"
    secret="$(sed -n 's/^secret_key=//p' "$BASE/credentials")"
    cat >"$BASE/s3proxy.conf" <<CONF
s3proxy.endpoint=http://127.0.0.1:$PORT
s3proxy.authorization=aws-v2-or-v4
s3proxy.identity=$access
s3proxy.credential=$secret
jclouds.provider=filesystem
jclouds.filesystem.basedir=$BASE/data
CONF
}

start() {
    if alive && port_open; then echo "s3: S3Proxy on http://127.0.0.1:$PORT (already running)"; return 0; fi
    if port_open; then
        echo "s3: port 127.0.0.1:$PORT is taken by another process; set MQBRIDGE_S3_PORT" >&2
        return 1
    fi
    install
    write_conf
    (exec nohup java -Xmx256m -jar "$(realpath "$JAR")" --properties "$BASE/s3proxy.conf" \
        </dev/null >"$BASE/s3proxy.log" 2>&1) &
    echo $! >"$PIDFILE"
    local started=$SECONDS
    while [ $((SECONDS - started)) -lt $START_TIMEOUT_S ]; do
        if port_open; then
            echo "s3: S3Proxy on http://127.0.0.1:$PORT (data $BASE/data, credentials $BASE/credentials)"
            return 0
        fi
        alive || break
        sleep 0.1
    done
    if alive; then
        echo "s3: S3Proxy did not open 127.0.0.1:$PORT within $START_TIMEOUT_S s; see $BASE/s3proxy.log" >&2
    else
        echo "s3: S3Proxy exited before opening 127.0.0.1:$PORT; see $BASE/s3proxy.log" >&2
    fi
    tail -30 "$BASE/s3proxy.log" >&2 || true
    stop >/dev/null 2>&1 || true
    return 1
}

stop() {
    if ! alive; then rm -f "$PIDFILE"; echo "s3: not running"; return 0; fi
    local pid
    pid="$(cat "$PIDFILE")"
    kill "$pid"
    for _ in $(seq 1 120); do
        kill -0 "$pid" 2>/dev/null || { rm -f "$PIDFILE"; echo "s3: stopped"; return 0; }
        sleep 0.25
    done
    echo "s3: pid $pid did not stop within 30 s of SIGTERM; killing it" >&2
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$PIDFILE"
}

case "${1:-start}" in
    install) install ;;
    start) start ;;
    stop) stop ;;
    status) if alive && port_open; then echo running; else echo stopped; exit 1; fi ;;
    *) echo "usage: $0 install|start|stop|status" >&2; exit 2 ;;
esac
