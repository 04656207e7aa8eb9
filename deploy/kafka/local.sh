#!/usr/bin/env bash
# A real single-node Apache Kafka broker (KRaft, combined broker+controller) without Docker.
#
#   deploy/kafka/local.sh start    resolve jars (cached), format the log dir the first time, start, wait,
#                                  print the address; a start after a stop keeps the topics and their data
#   deploy/kafka/local.sh stop     SIGTERM, then SIGKILL after 30 s
#   deploy/kafka/local.sh status   say whether it runs (exit 0 if it does, 3 if not)
#   deploy/kafka/local.sh reset    delete the data of a stopped broker (a clean slate for the next start)
#
# Environment: KAFKA_PORT (9092), KAFKA_CONTROLLER_PORT (KAFKA_PORT+1), KAFKA_VERSION (4.3.1),
# KAFKA_HOME (~/.cache/streameval/kafka: jars, Maven repository, data and logs live there).
# KAFKA_SASL=1 starts a broker whose listener asks for SASL/PLAIN logins and whose authorizer
# denies whatever no ACL allows, to try a client with limited rights: users `admin` (a super
# user, password `admin-secret`) and `limited` (password `limited-secret`, no rights until an
# ACL grants some). Not for production: the passwords are in this file.
# Running start twice is harmless: the second call reports the running broker.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
port="${KAFKA_PORT:-9092}"
cport="${KAFKA_CONTROLLER_PORT:-$((port + 1))}"
version="${KAFKA_VERSION:-4.3.1}"
home="${KAFKA_HOME:-$HOME/.cache/streameval/kafka}"
libs="$home/$version/libs"
run="$home/run-$port"
pidfile="$run/broker.pid"
logfile="$run/broker.log"

say() { echo "local.sh: $*" >&2; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

running() {
  [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

resolve_jars() {
  if [[ -f "$libs/.complete" ]]; then return; fi
  command -v mvn >/dev/null || { say "Maven (mvn) is needed to fetch the broker's jars"; exit 1; }
  command -v java >/dev/null || { say "Java 17+ is needed to run the broker"; exit 1; }
  say "resolving Apache Kafka $version jars from Maven Central into $libs (once; cached)"
  rm -rf "$libs"
  mkdir -p "$libs"
  mvn -B -q -f "$here/pom.xml" \
    -Dmaven.repo.local="$home/m2" \
    -Dkafka.version="$version" \
    dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$libs" >"$home/mvn-$version.log" 2>&1 || {
      say "Maven could not resolve the jars; see $home/mvn-$version.log"
      tail -n 20 "$home/mvn-$version.log" >&2
      exit 1
    }
  touch "$libs/.complete"
}

write_config() {
  local listener=PLAINTEXT
  [[ ${KAFKA_SASL:-0} == 1 ]] && listener=SASL_PLAINTEXT
  cat >"$run/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=$listener://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=$listener://127.0.0.1:$port
listener.security.protocol.map=$listener:$listener,CONTROLLER:PLAINTEXT
controller.listener.names=CONTROLLER
inter.broker.listener.name=$listener
log.dirs=$run/data
num.partitions=1
default.replication.factor=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
# a KIP-848 member that dies (kill -9) loses its partitions after 15 s, not 45 s: the tests
# kill members; the heartbeat stays 5 s (Kafka 3.9 reads these too, unused there by default)
group.consumer.min.session.timeout.ms=10000
group.consumer.session.timeout.ms=15000
log.cleaner.dedupe.buffer.size=2097152
log.cleaner.backoff.ms=1000
num.network.threads=2
num.io.threads=2
num.recovery.threads.per.data.dir=1
background.threads=2
auto.create.topics.enable=false
PROPS
  if [[ $listener == SASL_PLAINTEXT ]]; then
    # the controller listener stays PLAINTEXT on 127.0.0.1: its principal is ANONYMOUS
    cat >>"$run/server.properties" <<PROPS
sasl.enabled.mechanisms=PLAIN
sasl.mechanism.inter.broker.protocol=PLAIN
listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" user_admin="admin-secret" user_limited="limited-secret";
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:admin;User:ANONYMOUS
allow.everyone.if.no.acl.found=false
PROPS
  fi
}

java_cmd() {
  java -Xms256m -Xmx512m -XX:+UseG1GC \
    -Dlog4j2.configurationFile="file:$here/log4j2.properties" \
    -cp "$libs/*" "$@"
}

start() {
  if running; then
    say "already running (pid $(cat "$pidfile"))"
    echo "127.0.0.1:$port"
    return
  fi
  if port_open "$port"; then
    say "port $port is taken by another process; set KAFKA_PORT"
    exit 1
  fi
  resolve_jars
  mkdir -p "$run/data"
  write_config
  if [[ ! -f "$run/data/meta.properties" ]]; then
    local cluster
    cluster="$(java_cmd kafka.tools.StorageTool random-uuid 2>>"$logfile" | tail -n 1)"
    java_cmd kafka.tools.StorageTool format -t "$cluster" -c "$run/server.properties" >>"$logfile" 2>&1 || {
      say "formatting the log directory failed; see $logfile"
      tail -n 20 "$logfile" >&2
      exit 1
    }
    say "formatted a new log directory $run/data"
  else
    say "keeping the topics and data in $run/data (\`reset\` deletes them)"
  fi
  nohup java -Xms256m -Xmx512m -XX:+UseG1GC \
    -Dlog4j2.configurationFile="file:$here/log4j2.properties" \
    -cp "$libs/*" kafka.Kafka "$run/server.properties" >>"$logfile" 2>&1 </dev/null &
  echo $! >"$pidfile"
  local waited=0
  until port_open "$port"; do
    if ! running; then
      say "the broker exited during start-up; see $logfile"
      tail -n 30 "$logfile" >&2
      exit 1
    fi
    if ((waited >= 120)); then
      say "the broker did not answer on 127.0.0.1:$port within 60 s; see $logfile"
      stop
      exit 1
    fi
    sleep 0.5
    waited=$((waited + 1))
  done
  say "Kafka $version running (pid $(cat "$pidfile")), log $logfile"
  echo "127.0.0.1:$port"
}

stop() {
  if ! running; then
    say "not running"
    rm -f "$pidfile"
    return
  fi
  local pid
  pid="$(cat "$pidfile")"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 60); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  if kill -0 "$pid" 2>/dev/null; then
    say "no exit after 30 s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
  say "stopped"
}

status() {
  if running && port_open "$port"; then
    echo "running on 127.0.0.1:$port (pid $(cat "$pidfile"))"
  elif running; then
    echo "starting (pid $(cat "$pidfile")), not answering on 127.0.0.1:$port yet"
    exit 3
  else
    echo "not running"
    exit 3
  fi
}

reset() {
  if running; then
    say "the broker is running; stop it first"
    exit 1
  fi
  rm -rf "$run"
  say "deleted the broker's data ($run)"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  reset) reset ;;
  *) echo "usage: $0 start|stop|status|reset" >&2; exit 2 ;;
esac
