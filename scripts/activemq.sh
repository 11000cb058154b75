#!/usr/bin/env bash
# Start/stop a private ActiveMQ broker (Debian package `activemq`) with a STOMP connector on
# 127.0.0.1:${MQBRIDGE_STOMP_PORT:-61613}. State lives under ${MQBRIDGE_AMQ_BASE:-.amq}.
#   scripts/activemq.sh install|start|stop|status|restart
set -euo pipefail

BASE="$(realpath -m "${MQBRIDGE_AMQ_BASE:-.amq}")"
PORT="${MQBRIDGE_STOMP_PORT:-61613}"
MAX_FRAME="${MQBRIDGE_STOMP_MAX_FRAME:-104857600}"  # bytes; tests of oversized frames lower it
# Destination statistics over STOMP (the bridge's backlog gauge): on unless MQBRIDGE_AMQ_STATISTICS=off.
STATISTICS="${MQBRIDGE_AMQ_STATISTICS:-on}"
# Each queue's maxPageSize (see the destination policy below): MQBRIDGE_AMQ_PAGE_SIZE, 50000 unless set.
PAGE_SIZE="${MQBRIDGE_AMQ_PAGE_SIZE:-50000}"
AUTH_USER="${MQBRIDGE_AMQ_AUTH_USER:-}"  # set (with MQBRIDGE_AMQ_AUTH_PASSWORD): only that user may connect
# STOMP over TLS (tests/integration/test_broker_tls.py): MQBRIDGE_AMQ_TLS_KEYSTORE (PKCS12: the broker's key
# and certificate), MQBRIDGE_AMQ_TLS_TRUSTSTORE (PKCS12: the CA of client certificates), their password
# MQBRIDGE_AMQ_TLS_STORE_PASSWORD; a `stomp+ssl` connector on 127.0.0.1:MQBRIDGE_AMQ_TLS_PORT (server
# certificate only) and one on 127.0.0.1:MQBRIDGE_AMQ_MTLS_PORT (a client certificate required).
TLS_KEYSTORE="${MQBRIDGE_AMQ_TLS_KEYSTORE:-}"
TLS_PORT="${MQBRIDGE_AMQ_TLS_PORT:-}"
MTLS_PORT="${MQBRIDGE_AMQ_MTLS_PORT:-}"
HOME_DIR=/usr/share/activemq
PIDFILE="$BASE/activemq.pid"

install() {
    if [ ! -f "$HOME_DIR/bin/activemq.jar" ] || [ ! -f /usr/share/java/xstream.jar ]; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq activemq libxstream-java libjettison-java libxpp3-java >/dev/null
    fi
    # The Debian package enables an instance via /etc/activemq/instances-enabled on some set-ups;
    # ours is private, so make sure the packaged one does not hold the ports.
    systemctl stop activemq 2>/dev/null || true
}

write_conf() {
    mkdir -p "$BASE/conf" "$BASE/data"
    local plugins=""
    # statisticsBrokerPlugin answers a message sent to ActiveMQ.Statistics.Destination.<queue> (with a
    # reply-to) with the queue's size and enqueue/dequeue counts: the bridge's backlog gauge reads it.
    [ "$STATISTICS" = off ] || plugins="<statisticsBrokerPlugin/>"
    if [ -n "$AUTH_USER" ]; then
        plugins="$plugins<simpleAuthenticationPlugin anonymousAccessAllowed=\"false\"><users>
      <authenticationUser username=\"$AUTH_USER\" password=\"${MQBRIDGE_AMQ_AUTH_PASSWORD:?}\" groups=\"users\"/>
    </users></simpleAuthenticationPlugin>"
    fi
    [ -z "$plugins" ] || plugins="<plugins>$plugins</plugins>"
    # The statistics answer is a JMS MapMessage; ActiveMQ turns it into a STOMP body with XStream, which
    # Debian's activemq package leaves off the broker's class path (without it the answer is dropped).
    mkdir -p "$BASE/lib"
    local jar
    for jar in xstream jettison xpp3; do
        [ ! -f "/usr/share/java/$jar.jar" ] || ln -sf "/usr/share/java/$jar.jar" "$BASE/lib/$jar.jar"
    done
    local ssl_context="" tls_connectors=""
    if [ -n "$TLS_KEYSTORE" ]; then
        local password="${MQBRIDGE_AMQ_TLS_STORE_PASSWORD:?}"
        ssl_context="<sslContext><sslContext keyStore=\"file:$TLS_KEYSTORE\" keyStorePassword=\"$password\"
      keyStoreType=\"PKCS12\" trustStore=\"file:${MQBRIDGE_AMQ_TLS_TRUSTSTORE:?}\" trustStorePassword=\"$password\"
      trustStoreType=\"PKCS12\"/></sslContext>"
        [ -z "$TLS_PORT" ] || tls_connectors="<transportConnector name=\"stomp-tls\" uri=\"stomp+ssl://127.0.0.1:${TLS_PORT}\"/>"
        [ -z "$MTLS_PORT" ] || tls_connectors="$tls_connectors
      <transportConnector name=\"stomp-mtls\" uri=\"stomp+ssl://127.0.0.1:${MTLS_PORT}?transport.needClientAuth=true\"/>"
    fi
    cp /etc/activemq/instances-available/main/log4j2.properties "$BASE/conf/" 2>/dev/null || true
    cat >"$BASE/conf/activemq.xml" <<XML
<beans xmlns="http://www.springframework.org/schema/beans"
  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
  xsi:schemaLocation="http://www.springframework.org/schema/beans http://www.springframework.org/schema/beans/spring-beans-2.0.xsd
  http://activemq.apache.org/schema/core http://activemq.apache.org/schema/core/activemq-core.xsd">
  <bean class="org.springframework.beans.factory.config.PropertyPlaceholderConfigurer"/>
  <broker xmlns="http://activemq.apache.org/schema/core" useJmx="false" brokerName="mqbridge-test"
          dataDirectory="\${activemq.base}/data" schedulePeriodForDestinationPurge="0">
    <destinationPolicy>
      <policyMap><policyEntries>
        <!-- No producer flow control: tests and the benchmark fill queues faster than they drain.
             maxPageSize: a queue dispatches no more unacknowledged messages than it has paged in
             (default 200, which caps a bridge's units of work at a few hundred messages in all);
             it must cover the listeners' threads x in_flight x batch (the benchmark's 6 x 8 x 1000). -->
        <policyEntry queue=">" producerFlowControl="false" memoryLimit="256mb" maxPageSize="${PAGE_SIZE}"/>
      </policyEntries></policyMap>
    </destinationPolicy>
    <persistenceAdapter><kahaDB directory="\${activemq.base}/data/kahadb"/></persistenceAdapter>
    $plugins
    $ssl_context
    <systemUsage><systemUsage>
      <memoryUsage><memoryUsage limit="512 mb"/></memoryUsage>
      <storeUsage><storeUsage limit="8 gb"/></storeUsage>
      <tempUsage><tempUsage limit="2 gb"/></tempUsage>
    </systemUsage></systemUsage>
    <transportConnectors>
      <transportConnector name="stomp" uri="stomp://127.0.0.1:${PORT}?transport.maxFrameSize=${MAX_FRAME}"/>
      $tls_connectors
    </transportConnectors>
  </broker>
</beans>
XML
}

running() { [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

wait_port() {
    local port
    for port in "$PORT" $TLS_PORT $MTLS_PORT; do wait_one "$port" || return 1; done
}

wait_one() {
    for _ in $(seq 1 120); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
        sleep 0.5
    done
    echo "activemq: STOMP port $1 did not open; see $BASE/activemq.log" >&2
    tail -30 "$BASE/activemq.log" >&2 || true
    return 1
}

start() {
    if running; then wait_port; return; fi
    [ -f "$HOME_DIR/bin/activemq.jar" ] || install
    write_conf
    nohup java -Xmx2g -Dactivemq.home="$HOME_DIR" -Dactivemq.base="$BASE" \
        -Dactivemq.conf="$BASE/conf" -Dactivemq.data="$BASE/data" \
        -Dlog4j2.configurationFile="$BASE/conf/log4j2.properties" \
        -jar "$HOME_DIR/bin/activemq.jar" start "xbean:file:$BASE/conf/activemq.xml" \
        >"$BASE/activemq.log" 2>&1 &
    echo $! >"$PIDFILE"
    wait_port
    echo "activemq: STOMP on 127.0.0.1:$PORT (pid $(cat "$PIDFILE"), data $BASE/data)"
}

stop() {
    if running; then
        local pid; pid="$(cat "$PIDFILE")"
        kill "$pid"
        for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
        kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$PIDFILE"
}

case "${1:-start}" in
    install) install ;;
    start) start ;;
    stop) stop ;;
    restart) stop; start ;;
    status) if running; then echo running; else echo stopped; exit 1; fi ;;
    *) echo "usage: $0 install|start|stop|restart|status" >&2; exit 2 ;;
esac
