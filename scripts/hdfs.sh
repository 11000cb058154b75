#!/usr/bin/env bash
# Start/stop Hadoop's own HDFS mini cluster (org.apache.hadoop.test.MiniDFSClusterManager from
# hadoop-client-minicluster 3.4.2, the Hadoop of Spark 4.1): one namenode and one datanode in one JVM,
# every port on 127.0.0.1, the namenode's RPC on ${MQBRIDGE_HDFS_PORT:-9820}, so a warehouse is
# hdfs://127.0.0.1:9820/<path>. State (name and data directories, log, pid file, the cluster's
# core-site.xml) lives under ${MQBRIDGE_HDFS_BASE:-.hdfs}; each start formats a fresh file system.
# The jar comes from `scripts/jars.sh hdfs-test` (run by `install` and by `start` when missing); the
# rest of Hadoop's client (hadoop-client-api/-runtime, log4j) is pyspark's own.
#   scripts/hdfs.sh install|start|stop|status
set -euo pipefail
cd "$(dirname "$0")/.."

BASE="$(realpath -m "${MQBRIDGE_HDFS_BASE:-.hdfs}")"
PORT="${MQBRIDGE_HDFS_PORT:-9820}"
JAR="jars/hdfs-test/hadoop-client-minicluster-3.4.2.jar"
PIDFILE="$BASE/hdfs.pid"
START_TIMEOUT_S=120

install() {
    [ -f "$JAR" ] || scripts/jars.sh hdfs-test
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; }
alive() { [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

spark_jars() {
    local python=.venv/bin/python
    [ -x "$python" ] || python=python3
    "$python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))'
}

start() {
    if alive && port_open; then echo "hdfs: namenode on hdfs://127.0.0.1:$PORT (already running)"; return 0; fi
    if port_open; then
        echo "hdfs: port 127.0.0.1:$PORT is taken by another process; set MQBRIDGE_HDFS_PORT" >&2
        return 1
    fi
    install
    local sj classpath
    sj="$(spark_jars)"
    classpath="$(realpath "$JAR")"
    for j in hadoop-client-api hadoop-client-runtime slf4j-api log4j-api log4j-core log4j-slf4j2-impl \
             jcl-over-slf4j; do
        for f in "$sj/$j"-[0-9]*.jar; do [ -f "$f" ] && classpath="$classpath:$f"; done
    done
    rm -rf "$BASE/data" "$BASE/details.json" "$BASE/hdfs.log"
    mkdir -p "$BASE/data"
    cat >"$BASE/log4j2.properties" <<CONF
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = $BASE/hdfs.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n
CONF
    # cwd $BASE: the mini cluster's relative scratch paths land there too.
    (cd "$BASE" && exec nohup java -Xmx512m -Dlog4j2.configurationFile="$BASE/log4j2.properties" -cp "$classpath" \
        org.apache.hadoop.test.MiniDFSClusterManager -nnport "$PORT" -datanodes 1 -format \
        -D "hdfs.minidfs.basedir=$BASE/data" -D dfs.namenode.http-address=127.0.0.1:0 \
        -writeConfig "$BASE/core-site.xml" -writeDetails "$BASE/details.json" \
        </dev/null >"$BASE/hdfs.out" 2>&1) &
    echo $! >"$PIDFILE"
    local started=$SECONDS
    # details.json is written once the namenode and the datanode are up (MiniDFSCluster waits for it).
    while [ $((SECONDS - started)) -lt $START_TIMEOUT_S ]; do
        if [ -s "$BASE/details.json" ] && port_open; then
            echo "hdfs: namenode on hdfs://127.0.0.1:$PORT (data $BASE/data, $((SECONDS - started)) s)"
            return 0
        fi
        if ! alive; then break; fi
        sleep 0.25
    done
    if alive; then
        echo "hdfs: the mini cluster did not open hdfs://127.0.0.1:$PORT within ${START_TIMEOUT_S} s; see $BASE/hdfs.out and $BASE/hdfs.log" >&2
    else
        echo "hdfs: the mini cluster exited before opening hdfs://127.0.0.1:$PORT; see $BASE/hdfs.out and $BASE/hdfs.log" >&2
    fi
    tail -30 "$BASE/hdfs.out" "$BASE/hdfs.log" >&2 2>/dev/null || true
    stop >/dev/null 2>&1 || true
    return 1
}

stop() {
    if ! alive; then rm -f "$PIDFILE"; echo "hdfs: not running"; return 0; fi
    local pid
    pid="$(cat "$PIDFILE")"
    kill "$pid"
    for _ in $(seq 1 120); do
        kill -0 "$pid" 2>/dev/null || { rm -f "$PIDFILE"; echo "hdfs: stopped"; return 0; }
        sleep 0.25
    done
    echo "hdfs: pid $pid did not stop within 30 s of SIGTERM; killing it" >&2
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
