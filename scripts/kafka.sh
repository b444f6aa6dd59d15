#!/usr/bin/env bash
# A single-node Apache Kafka broker (KRaft mode) for weir's tests.
#
#   scripts/kafka.sh fetch          the broker's jars from Maven Central, once,
#                                   into a cache outside the clone
#   scripts/kafka.sh start DIR      formats DIR, starts a broker on 127.0.0.1
#                                   at a free port, waits (up to 180 s) until it answers,
#                                   prints its bootstrap address (also in
#                                   DIR/bootstrap)
#   scripts/kafka.sh stop DIR       stops it
#
# WEIR_KAFKA_WATCH=PID stops the broker and removes DIR when process PID
# exits (a test run that dies does not leave a broker behind). KAFKA_VERSION picks the version;
# WEIR_KAFKA_CACHE the cache (default ~/.cache/weir/kafka-<version>).
set -euo pipefail

VERSION="${KAFKA_VERSION:-4.4.0}"
CACHE="${WEIR_KAFKA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/weir/kafka-$VERSION}"

die() { echo "kafka.sh: $*" >&2; exit 1; }

fetch() {
  [ -f "$CACHE/complete" ] && return 0
  command -v mvn >/dev/null || die "Maven (mvn) is needed to fetch Kafka's jars"
  command -v java >/dev/null || die "Java 17 or newer is needed to run Kafka"
  local work
  work="$(mktemp -d)"
  cat > "$work/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>weir</groupId><artifactId>kafka-broker</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$VERSION</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>2.24.3</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>2.24.3</version></dependency>
  </dependencies>
</project>
POM
  echo "kafka.sh: fetching Apache Kafka $VERSION's jars into $CACHE" >&2
  mkdir -p "$CACHE/libs"
  # A network hiccup on a fresh machine should not fail the whole run:
  # three tries, Maven's own retries within each.
  local try
  for try in 1 2 3; do
    (cd "$work" && mvn -q -B -Dstyle.color=never -Dmaven.wagon.http.retryHandler.count=3 \
        dependency:copy-dependencies -DincludeScope=runtime \
        -DoutputDirectory="$CACHE/libs") >&2 && break
    [ "$try" = 3 ] && die "fetching Kafka's jars failed three times"
    echo "kafka.sh: fetching failed (try $try of 3); trying again" >&2
    sleep 5
  done
  rm -rf "$work"
  touch "$CACHE/complete"
}

# Two distinct free ports (both held open while chosen, so they differ).
free_ports() {
  python3 -c 'import socket
a, b = socket.socket(), socket.socket()
a.bind(("127.0.0.1", 0)); b.bind(("127.0.0.1", 0))
print(a.getsockname()[1], b.getsockname()[1])'
}

start() {
  local dir="${1:?usage: kafka.sh start DIR}"
  fetch
  mkdir -p "$dir"
  dir="$(cd "$dir" && pwd)"
  local port controller
  read -r port controller < <(free_ports)
  cat > "$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$controller
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$dir/data
num.partitions=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
group.initial.rebalance.delay.ms=0
transaction.abort.timed.out.transaction.cleanup.interval.ms=5000
# Keep every record: tests write event times near the epoch, which time
# retention (7 days by record timestamp) would delete within a minute.
log.retention.ms=-1
PROPS
  cat > "$dir/log4j2.properties" <<LOG
rootLogger.level=WARN
rootLogger.appenderRef.file.ref=file
logger.started.name=kafka.server.KafkaRaftServer
logger.started.level=INFO
appender.file.type=File
appender.file.name=file
appender.file.fileName=$dir/broker.log
appender.file.layout.type=PatternLayout
appender.file.layout.pattern=[%d] %p %m (%c)%n
LOG
  local cp="$CACHE/libs/*"
  local java_opts=(-Xms256m -Xmx768m -XX:+UseG1GC "-Dlog4j2.configurationFile=$dir/log4j2.properties")
  java "${java_opts[@]}" -cp "$cp" kafka.tools.StorageTool format \
      -t "$(python3 -c 'import base64, uuid; print(base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="))')" \
      -c "$dir/server.properties" >"$dir/format.log" 2>&1 || die "formatting $dir failed: $(cat "$dir/format.log")"
  nohup java "${java_opts[@]}" -cp "$cp" kafka.Kafka "$dir/server.properties" >"$dir/stdout.log" 2>&1 &
  local pid=$!
  echo "$pid" > "$dir/pid"
  if [ -n "${WEIR_KAFKA_WATCH:-}" ]; then
    # Stops the broker once the watched process is gone.
    nohup bash -c "while kill -0 $WEIR_KAFKA_WATCH 2>/dev/null && kill -0 $pid 2>/dev/null; do sleep 1; done;
      kill $pid 2>/dev/null; for _ in \$(seq 1 40); do kill -0 $pid 2>/dev/null || break; sleep 0.25; done;
      kill -9 $pid 2>/dev/null; rm -rf '$dir'" >/dev/null 2>&1 &
  fi
  # A loaded 2-core machine (the test suite runs beside it) can take a
  # while to start a JVM: up to 180 s.
  for _ in $(seq 1 360); do
    if ! kill -0 "$pid" 2>/dev/null; then
      die "the broker exited: $(tail -20 "$dir/stdout.log" "$dir/broker.log" 2>/dev/null)"
    fi
    if python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', $port), 1)" 2>/dev/null \
       && grep -q "Kafka Server started\|started (kafka.server" "$dir/stdout.log" "$dir/broker.log" 2>/dev/null; then
      echo "127.0.0.1:$port" > "$dir/bootstrap"
      echo "127.0.0.1:$port"
      return 0
    fi
    sleep 0.5
  done
  kill "$pid" 2>/dev/null || true
  die "the broker did not answer on 127.0.0.1:$port within 180 s: $(tail -20 "$dir/stdout.log" "$dir/broker.log" 2>/dev/null)"
}

stop() {
  local dir="${1:?usage: kafka.sh stop DIR}"
  [ -f "$dir/pid" ] || return 0
  local pid
  pid="$(cat "$dir/pid")"
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$dir/pid"
}

case "${1:-}" in
  fetch) fetch ;;
  start) start "${2:-}" ;;
  stop) stop "${2:-}" ;;
  *) die "usage: kafka.sh fetch | start DIR | stop DIR" ;;
esac
