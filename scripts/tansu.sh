#!/usr/bin/env bash
# A throw-away local Kafka-compatible broker: Tansu 0.6.0 (crates.io `tansu`), one broker with
# in-memory storage, bound to 127.0.0.1 only, for sea-orm-outbox-kafka's tests.
#
#   scripts/tansu.sh install  install tansu when missing (cargo install), start nothing
#   scripts/tansu.sh start    install tansu when missing, start the broker, wait until it answers
#   scripts/tansu.sh stop     stop it (SIGTERM, then SIGKILL after 20 s)
#   scripts/tansu.sh status   exit 0 only when the broker answers on its port
#
# Idempotent: `start` when running does nothing, `stop` when stopped does nothing. The storage is
# memory://: topics and records are gone when the broker stops. Tansu creates no topic on first
# use; the crate's test consumer creates the ones it reads.
# Environment (defaults in brackets):
#   TANSU_STATE_DIR      [/tmp/outbox-tansu]  pid file and log
#   TANSU_PORT           [9092]  listener and advertised listener, on 127.0.0.1
#   TANSU_START_TIMEOUT  [30]    seconds to wait for the port
# The clients then use KAFKA_BROKERS=127.0.0.1:$TANSU_PORT.
set -euo pipefail

STATE_DIR=${TANSU_STATE_DIR:-/tmp/outbox-tansu}
PORT=${TANSU_PORT:-9092}
START_TIMEOUT=${TANSU_START_TIMEOUT:-30}
VERSION=0.6.0
BIN=tansu
export PATH="$HOME/.cargo/bin:$PATH"

log() { printf 'tansu.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

install_if_missing() {
    if command -v "$BIN" >/dev/null 2>&1; then
        return 0
    fi
    log "$BIN not found: cargo install tansu@$VERSION --locked --features dynostore (takes several minutes)"
    cargo install "tansu@$VERSION" --locked --features dynostore || die "cargo install tansu@$VERSION failed"
    command -v "$BIN" >/dev/null 2>&1 || die "$BIN still not on PATH after the install"
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

pid_alive() { # 0 when the pid file names a live tansu process
    local f=$STATE_DIR/tansu.pid pid cmd
    [[ -f $f ]] || return 1
    pid=$(cat "$f" 2>/dev/null) || return 1
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
    [[ -z $cmd || $cmd == *tansu* ]]
}

cmd_start() {
    if ! port_open "$PORT" && pid_alive; then
        # One that this script started is still coming up: wait for it, start no second one.
        local deadline=$((SECONDS + START_TIMEOUT))
        until port_open "$PORT"; do
            pid_alive || die "tansu exited before it answered; see $STATE_DIR/tansu.log"
            ((SECONDS < deadline)) || die "tansu (pid $(cat "$STATE_DIR/tansu.pid")) did not answer on 127.0.0.1:$PORT within ${START_TIMEOUT}s"
            sleep 0.2
        done
    fi
    if port_open "$PORT"; then
        if pid_alive; then
            log "already running (127.0.0.1:$PORT, pid $(cat "$STATE_DIR/tansu.pid"))"
        else
            log "port $PORT answers already (another broker?); not starting one"
        fi
        return 0
    fi
    install_if_missing
    mkdir -p "$STATE_DIR"
    local url="tcp://127.0.0.1:$PORT"
    setsid nohup "$BIN" broker --listener-url "$url" --advertised-listener-url "$url" \
        --storage-engine memory://tansu/ >"$STATE_DIR/tansu.log" 2>&1 </dev/null &
    echo $! >"$STATE_DIR/tansu.pid"
    local deadline=$((SECONDS + START_TIMEOUT))
    until port_open "$PORT"; do
        pid_alive || die "tansu exited before it answered; see $STATE_DIR/tansu.log: $(tail -5 "$STATE_DIR/tansu.log")"
        ((SECONDS < deadline)) || die "tansu did not answer on 127.0.0.1:$PORT within ${START_TIMEOUT}s; see $STATE_DIR/tansu.log"
        sleep 0.2
    done
    log "running: KAFKA_BROKERS=127.0.0.1:$PORT (pid $(cat "$STATE_DIR/tansu.pid"), log $STATE_DIR/tansu.log)"
}

cmd_stop() {
    local f=$STATE_DIR/tansu.pid pid
    if ! pid_alive; then
        rm -f "$f"
        log "not running"
        return 0
    fi
    pid=$(cat "$f")
    log "stopping tansu (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + 20))
    while kill -0 "$pid" 2>/dev/null; do
        if ((SECONDS >= deadline)); then
            log "tansu did not exit within 20s; SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            deadline=$((SECONDS + 5))
        fi
        sleep 0.1
    done
    rm -f "$f"
    log "stopped"
}

cmd_status() {
    if port_open "$PORT"; then
        echo "tansu: up (127.0.0.1:$PORT)"
        return 0
    fi
    echo "tansu: down (127.0.0.1:$PORT)"
    return 1
}

case "${1:-}" in
    install) install_if_missing ;;
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    *)
        echo "usage: $0 install|start|stop|status" >&2
        exit 2
        ;;
esac
