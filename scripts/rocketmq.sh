#!/usr/bin/env bash
# A throw-away local RocketMQ (rocketmq-rust 1.0.0): one name server and one broker, bound to
# 127.0.0.1 only, with a small store (~75 MB on disk instead of ~1.5 GB).
#
#   scripts/rocketmq.sh install       install the servers when missing (cargo install), start nothing
#   scripts/rocketmq.sh start         install the servers when missing, start both, wait until ready
#   scripts/rocketmq.sh stop          stop both (SIGTERM, then SIGKILL after a grace period)
#   scripts/rocketmq.sh status        exit 0 only when the name server and the broker both answer
#   scripts/rocketmq.sh stop-broker   stop only the broker (outage drills); `start` brings it back
#   scripts/rocketmq.sh kill-broker   SIGKILL only the broker (a crash); `start` brings it back
#
# A two-broker cluster: two name servers and two broker masters, `broker-a` and
# `broker-b`, of one cluster (`OutboxCluster`), each with its own ports, store, state directory
# and health port; every broker registers with both name servers. Each part can be stopped,
# killed, paused and resumed on its own:
#   scripts/rocketmq.sh cluster-start           start whatever part is not running, wait until ready
#   scripts/rocketmq.sh cluster-stop            stop every part (a paused broker is resumed first)
#   scripts/rocketmq.sh cluster-status          one line per part; exit 0 only when all four answer
#   scripts/rocketmq.sh broker-start a|b        start one broker (through the settle pass)
#   scripts/rocketmq.sh broker-stop a|b         SIGTERM (then SIGKILL after 20 s)
#   scripts/rocketmq.sh broker-kill a|b         SIGKILL (a crash: the connections close)
#   scripts/rocketmq.sh broker-pause a|b        SIGSTOP (a hang: the connections stay open, the name
#                                               servers list it for 120 s more)
#   scripts/rocketmq.sh broker-resume a|b       SIGCONT
#   scripts/rocketmq.sh namesrv-start 1|2, namesrv-stop 1|2, namesrv-kill 1|2
# Clients use ROCKETMQ_NAMESRV_ADDR="127.0.0.1:21876;127.0.0.1:21877" (cluster-start prints it).
# A topic auto-created by a send lives only on the broker that got that send: create it on both
# first (the crate's test consumer does, through the broker's TBW102 template).
# Cluster environment (defaults in brackets; the single-instance variables above do not apply):
#   ROCKETMQ_CLUSTER_DIR   [/tmp/outbox-rocketmq-cluster]  one state directory per part in it
#   ROCKETMQ_CLUSTER_NAMESRV_PORT_1 [21876], ROCKETMQ_CLUSTER_NAMESRV_PORT_2 [21877]
#   ROCKETMQ_CLUSTER_BROKER_PORT_A  [22911], ROCKETMQ_CLUSTER_BROKER_PORT_B  [22931]
#                          (each broker also uses PORT-2, PORT+1 for HA, and +7 in its settle pass)
#   ROCKETMQ_CLUSTER_HEALTH_PORT_A  [22990], ROCKETMQ_CLUSTER_HEALTH_PORT_B  [22991]
#
# Everything is idempotent: `start` when running does nothing, `stop` when stopped does nothing.
# Environment (defaults in brackets); a second, independent instance only needs other values:
#   ROCKETMQ_STATE_DIR     [/tmp/outbox-rocketmq]   configs, stores, pid files, logs
#   ROCKETMQ_NAMESRV_PORT  [9876]
#   ROCKETMQ_BROKER_PORT   [10911]  (the broker also listens on BROKER_PORT-2, the "fast" port)
#   ROCKETMQ_HA_PORT       [BROKER_PORT+1]
#   ROCKETMQ_HEALTH_PORT   [10990]  broker's /readyz and /livez
#   ROCKETMQ_BROKER_NAME   [outbox-broker-a]
#   ROCKETMQ_BROKER_NAMESRV_ADDR [127.0.0.1:$ROCKETMQ_NAMESRV_PORT] the name server(s) the broker
#                          registers with, `;`-separated
#   ROCKETMQ_MAX_MESSAGE_SIZE [4194304] broker's maxMessageSize in bytes
#   ROCKETMQ_START_TIMEOUT [60] seconds to wait for readiness
#   ROCKETMQ_SETTLE_PORT_OFFSET [7] the settle pass before a restart (see settle_store) uses
#                          every port above plus this
#   ROCKETMQ_AUTH_USER     [unset] `user:secret`: the broker requires authentication
#                          (authenticationEnabled; authorization stays off) and creates this
#                          user (a super user) at start, kept in $STATE_DIR/auth. Clients then
#                          set ROCKETMQ_ACCESS_KEY=user and ROCKETMQ_SECRET_KEY=secret. The
#                          secret is written only to the broker's TOML (mode 600) and its user
#                          store, never to this script's output; the name server has no auth.
# The clients then use ROCKETMQ_NAMESRV_ADDR=127.0.0.1:$ROCKETMQ_NAMESRV_PORT.
set -euo pipefail

STATE_DIR=${ROCKETMQ_STATE_DIR:-/tmp/outbox-rocketmq}
NAMESRV_PORT=${ROCKETMQ_NAMESRV_PORT:-9876}
BROKER_PORT=${ROCKETMQ_BROKER_PORT:-10911}
HA_PORT=${ROCKETMQ_HA_PORT:-$((BROKER_PORT + 1))}
HEALTH_PORT=${ROCKETMQ_HEALTH_PORT:-10990}
BROKER_NAME=${ROCKETMQ_BROKER_NAME:-outbox-broker-a}
BROKER_NAMESRV_ADDR=${ROCKETMQ_BROKER_NAMESRV_ADDR:-127.0.0.1:$NAMESRV_PORT}
MAX_MESSAGE_SIZE=${ROCKETMQ_MAX_MESSAGE_SIZE:-4194304}
START_TIMEOUT=${ROCKETMQ_START_TIMEOUT:-60}
VERSION=1.0.0
# Read once and taken out of the environment, so that the servers started below do not
# inherit it.
AUTH_USER=${ROCKETMQ_AUTH_USER:-}
unset ROCKETMQ_AUTH_USER
AUTH_USER_FORM='^[A-Za-z0-9_.-]+:[^"\\[:cntrl:]]+$'
if [[ -n $AUTH_USER ]] && [[ ! $AUTH_USER =~ $AUTH_USER_FORM ]]; then
    printf 'rocketmq.sh: %s\n' "ROCKETMQ_AUTH_USER must be user:secret (user: letters, digits, _ . -; secret: no quote, backslash or control character)" >&2
    exit 1
fi

NAMESRV_BIN=rocketmq-namesrv-rust
BROKER_BIN=rocketmq-broker-rust
export PATH="$HOME/.cargo/bin:$PATH"

log() { printf 'rocketmq.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# ---- installation ---------------------------------------------------------------------------
install_if_missing() {
    local bin=$1 crate=$2
    if command -v "$bin" >/dev/null 2>&1; then
        return 0
    fi
    log "$bin not found: cargo install --locked $crate@$VERSION (takes several minutes)"
    cargo install --locked "$crate@$VERSION" || die "cargo install $crate@$VERSION failed"
    command -v "$bin" >/dev/null 2>&1 || die "$bin still not on PATH after the install"
}

cmd_install() {
    install_if_missing "$NAMESRV_BIN" rocketmq-namesrv
    install_if_missing "$BROKER_BIN" rocketmq-broker
}

# ---- probes ---------------------------------------------------------------------------------
port_open() { # port
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

http_get() { # port path -> body on stdout
    if command -v curl >/dev/null 2>&1; then
        curl -s --max-time 2 "http://127.0.0.1:$1$2" || true
    else
        # Plain HTTP/1.0 over bash's /dev/tcp; the body is the part after the empty line.
        (
            exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 0
            printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$2" >&3
            timeout 2 cat <&3 | sed '1,/^\r\{0,1\}$/d'
        ) 2>/dev/null || true
    fi
}

namesrv_up() { port_open "$NAMESRV_PORT"; }
broker_ready() { ready_on "$HEALTH_PORT"; }
ready_on() { # health port; no pipe into `grep -q` (under pipefail its early exit can fail the test)
    local body
    body=$(http_get "$1" /readyz)
    [[ $body == *'"status":"ready"'* ]]
}

pid_alive() { # pidfile -> 0 when the pid in it is a live rocketmq process
    local f=$1 pid
    [[ -f $f ]] || return 1
    pid=$(cat "$f" 2>/dev/null) || return 1
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    local cmd
    cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
    # Empty for a moment while the process goes from one exec to the next (setsid, nohup, the
    # server): alive. Read into a variable, not piped into `grep -q`: under pipefail the pipe's
    # early close could report a live server dead (CI once failed with "the broker exited
    # before it was ready" while the broker ran on).
    [[ -z $cmd || $cmd == *rocketmq* ]]
}

# A listener whose port lies in the kernel's ephemeral range (net.ipv4.ip_local_port_range,
# 32768-60999 by default) can find it taken by some outgoing connection's local end, and the
# broker then fails at start with nothing but "Service lifecycle operation failed". Every
# default port of this script is below that range; this warns about configured ones that are not.
warn_if_ephemeral() { # port...
    local lo hi p
    read -r lo hi 2>/dev/null </proc/sys/net/ipv4/ip_local_port_range || return 0
    for p in "$@"; do
        if ((p >= lo && p <= hi)); then
            log "warning: port $p is inside the ephemeral port range $lo-$hi; an outgoing connection may hold it"
        fi
    done
}

report_ports() { # port... : say which of them some socket holds (a bind failure's likely cause)
    local p held
    command -v ss >/dev/null 2>&1 || return 0
    for p in "$@"; do
        held=$(ss -Htan "( sport = :$p )" 2>/dev/null | awk 'NR <= 3' | tr -s ' ' | tr '\n' ';') || true
        [[ -z $held ]] || log "port $p is held by a socket: $held"
    done
}

wait_for() { # description, command...
    local what=$1; shift
    local deadline=$((SECONDS + START_TIMEOUT))
    until "$@"; do
        if ((SECONDS >= deadline)); then
            return 1
        fi
        sleep 0.2
    done
    log "$what is ready"
}

# ---- configuration --------------------------------------------------------------------------
write_configs() {
    mkdir -p "$STATE_DIR/namesrv" "$STATE_DIR/broker/store" "$STATE_DIR/logs"
    local auth_keys=""
    if [[ -n $AUTH_USER ]]; then
        mkdir -p "$STATE_DIR/auth"
        chmod 700 "$STATE_DIR/auth"
        auth_keys="authenticationEnabled = true
authorizationEnabled = false
authConfigPath = \"$STATE_DIR/auth\"
initAuthenticationUser = \"$AUTH_USER\""
        log "authentication on: user ${AUTH_USER%%:*} (users in $STATE_DIR/auth)"
    fi
    cat >"$STATE_DIR/namesrv.toml" <<EOF
# Written by scripts/rocketmq.sh
rocketmqHome = "$STATE_DIR"
kvConfigPath = "$STATE_DIR/namesrv/kvConfig.json"
configStorePath = "$STATE_DIR/namesrv/namesrv.properties"
EOF
    # The TOML may hold the auth user's secret: readable by its owner only, from the start.
    : >"$STATE_DIR/broker.toml"
    chmod 600 "$STATE_DIR/broker.toml"
    cat >"$STATE_DIR/broker.toml" <<EOF
# Written by scripts/rocketmq.sh
[broker]
namesrvAddr = "$BROKER_NAMESRV_ADDR"
brokerIp1 = "127.0.0.1"
listenPort = $BROKER_PORT
storePathRootDir = "$STATE_DIR/broker"
$auth_keys

[broker.brokerServerConfig]
bindAddress = "127.0.0.1"

[broker.brokerIdentity]
brokerName = "$BROKER_NAME"
brokerClusterName = "OutboxCluster"
brokerId = 0

[store]
storeType = "LocalFile"
brokerRole = "ASYNC_MASTER"
storePathRootDir = "$STATE_DIR/broker/store"
haListenAddress = "127.0.0.1"
haListenPort = $HA_PORT
# Small store: 64 MiB commitlog files and a small index (~75 MB on disk instead of ~1.5 GB).
mappedFileSizeCommitLog = 67108864
maxHashSlotNum = 50000
maxIndexNum = 200000
maxMessageSize = $MAX_MESSAGE_SIZE
# Above 85 % disk use the broker would delete commit-log files before their retention (72 h)
# ends, consumed or not; a test broker keeps them.
cleanFileForciblyEnable = false
EOF
}

# The broker refuses every write once its disk is more than 90 % used (until it is back at 85 %),
# by its own measure: (size - available) / size, where blocks reserved for root count as used, so
# the share can run far above df's Use%. Checked before each start, so a full disk stops here
# with the reason and not later as refused sends.
check_disk() {
    local size avail used
    read -r size avail < <(df -B1 --output=size,avail "$STATE_DIR" | tail -n 1)
    used=$(((size - avail) * 100 / size))
    ((used < 88)) || die "the disk holding $STATE_DIR is ${used}% used by the broker's measure ((size - available) / size); it refuses writes above 90%: free at least $(((size * 12 / 100 - avail) / 1073741824 + 1)) GiB"
}

# ---- start / stop ---------------------------------------------------------------------------
start_namesrv() {
    if namesrv_up; then
        return 0
    fi
    warn_if_ephemeral "$NAMESRV_PORT"
    log "starting name server on 127.0.0.1:$NAMESRV_PORT"
    ROCKETMQ_HOME="$STATE_DIR" setsid nohup "$NAMESRV_BIN" -c "$STATE_DIR/namesrv.toml" \
        --bindAddress 127.0.0.1 --listenPort "$NAMESRV_PORT" --rocketmqHome "$STATE_DIR" \
        >>"$STATE_DIR/logs/namesrv.log" 2>&1 </dev/null &
    echo $! >"$STATE_DIR/namesrv.pid"
    wait_for "name server (127.0.0.1:$NAMESRV_PORT)" namesrv_up || {
        tail -n 30 "$STATE_DIR/logs/namesrv.log" >&2 || true
        die "name server did not accept connections within ${START_TIMEOUT}s (log: $STATE_DIR/logs/namesrv.log)"
    }
}

# rocketmq-rust 1.0 broker defect (found by examples/chaos/; evidence in RELIABILITY.md): a
# message appended to the commit log while the broker shuts down can be left out of its consume
# queue ("shutdown ReputMessageService, but CommitLog have not finish to be dispatched"). At the
# next start the broker computes each queue's next offset from the consume queues BEFORE it
# dispatches that tail, so it hands the same queue offset to the next message it accepts: that
# message is acknowledged (SEND_OK) and stored, but its consume-queue entry collides with the
# tail's and no consumer ever receives it. Workaround: before the broker serves clients again,
# start it once where no client can reach it, let it dispatch the tail,
# and stop it cleanly; the real start then computes every offset from complete queues.
# (Apache RocketMQ's store waits for that dispatch before it computes the offsets.) The settle
# pass runs a throw-away name server and the broker on ports offset by SETTLE_OFFSET, so no
# client can reach it.
SETTLE_OFFSET=${ROCKETMQ_SETTLE_PORT_OFFSET:-7}
[[ $SETTLE_OFFSET =~ ^[1-9][0-9]*$ ]] || die "ROCKETMQ_SETTLE_PORT_OFFSET must be a positive number"
SETTLE_DIR="$STATE_DIR/settle"

settle_cleanup() { # stop whatever a settle pass left running (also after a failed or killed one)
    stop_one "broker (settle pass)" "$SETTLE_DIR/broker.pid" TERM
    stop_one "name server (settle pass)" "$SETTLE_DIR/namesrv.pid" TERM
}

settle_store() {
    local commitlog="$STATE_DIR/broker/store/commitlog"
    if [[ ! -d $commitlog ]] || [[ -z $(ls -A "$commitlog" 2>/dev/null) ]]; then
        return 0 # a fresh store has no tail
    fi
    local ns_port=$((NAMESRV_PORT + SETTLE_OFFSET)) port=$((BROKER_PORT + SETTLE_OFFSET))
    local health=$((HEALTH_PORT + SETTLE_OFFSET)) dir="$SETTLE_DIR"
    local slog="$STATE_DIR/logs/broker-settle.log"
    settle_cleanup # a pass of an earlier, killed run of this script
    local p
    for p in "$ns_port" "$port" "$((port - 2))" "$((HA_PORT + SETTLE_OFFSET))" "$health"; do
        port_open "$p" && die "port $p (settle pass) is in use: another process holds it"
    done
    mkdir -p "$dir/namesrv"
    trap settle_cleanup EXIT # nothing of the pass outlives this script
    cat >"$dir/namesrv.toml" <<EOF
# Written by scripts/rocketmq.sh (settle pass)
rocketmqHome = "$dir"
kvConfigPath = "$dir/namesrv/kvConfig.json"
configStorePath = "$dir/namesrv/namesrv.properties"
EOF
    : >"$dir/broker.toml"
    chmod 600 "$dir/broker.toml"
    sed -e "s/^namesrvAddr = .*/namesrvAddr = \"127.0.0.1:$ns_port\"/" \
        -e "s/^listenPort = .*/listenPort = $port/" \
        -e "s/^haListenPort = .*/haListenPort = $((HA_PORT + SETTLE_OFFSET))/" \
        "$STATE_DIR/broker.toml" >"$dir/broker.toml"
    local attempt clean=0
    for attempt in 1 2 3 4 5; do
        log "settling the broker store (dispatching any commit-log tail) on 127.0.0.1:$port, pass $attempt"
        : >"$slog"
        ROCKETMQ_HOME="$dir" setsid nohup "$NAMESRV_BIN" -c "$dir/namesrv.toml" \
            --bindAddress 127.0.0.1 --listenPort "$ns_port" --rocketmqHome "$dir" \
            >>"$slog" 2>&1 </dev/null &
        echo $! >"$dir/namesrv.pid"
        wait_for "settle name server (127.0.0.1:$ns_port)" port_open "$ns_port" ||
            die "the settle pass's name server did not start (log: $slog)"
        ROCKETMQ_HOME="$STATE_DIR" \
            ROCKETMQ_SECURITY_PROFILE=development-insecure-loopback \
            ROCKETMQ_HEALTH_BIND_ADDR="127.0.0.1:$health" \
            ROCKETMQ_SHUTDOWN_TIMEOUT_SECONDS=10 \
            NAMESRV_ADDR="127.0.0.1:$ns_port" \
            setsid nohup "$BROKER_BIN" -c "$dir/broker.toml" -n "127.0.0.1:$ns_port" \
            >>"$slog" 2>&1 </dev/null &
        echo $! >"$dir/broker.pid"
        if ! wait_for "settle broker (127.0.0.1:$port)" ready_on "$health"; then
            settle_cleanup
            tail -n 30 "$slog" >&2 || true
            die "the settle pass of the broker did not get ready (log: $slog)"
        fi
        sleep 1 # the dispatch of a tail takes milliseconds
        STOP_KILLED=0
        stop_one "broker (settle pass)" "$dir/broker.pid" TERM
        local killed=$STOP_KILLED
        stop_one "name server (settle pass)" "$dir/namesrv.pid" TERM
        wait_port_closed "$port"
        wait_port_closed "$ns_port"
        cat "$slog" >>"$STATE_DIR/logs/broker.log"
        # Clean: stopped by itself (no SIGKILL) with nothing left to dispatch.
        if ((killed == 0)) && ! grep -q "have not finish to be dispatched" "$slog"; then
            clean=1
            break
        fi
    done
    ((clean)) || die "the broker store still has an undispatched commit-log tail after 5 settle passes (log: $slog)"
    trap - EXIT
}

start_broker() {
    if broker_ready; then
        return 0
    fi
    if pid_alive "$STATE_DIR/broker.pid"; then
        log "broker process $(cat "$STATE_DIR/broker.pid") exists but is not ready; waiting"
    else
        check_disk
        settle_store
        warn_if_ephemeral "$BROKER_PORT" "$((BROKER_PORT - 2))" "$HA_PORT" "$HEALTH_PORT"
        log "starting broker on 127.0.0.1:$BROKER_PORT (health 127.0.0.1:$HEALTH_PORT)"
        ROCKETMQ_HOME="$STATE_DIR" \
            ROCKETMQ_SECURITY_PROFILE=development-insecure-loopback \
            ROCKETMQ_HEALTH_BIND_ADDR="127.0.0.1:$HEALTH_PORT" \
            ROCKETMQ_SHUTDOWN_TIMEOUT_SECONDS="${ROCKETMQ_SHUTDOWN_TIMEOUT_SECONDS:-10}" \
            NAMESRV_ADDR="$BROKER_NAMESRV_ADDR" \
            setsid nohup "$BROKER_BIN" -c "$STATE_DIR/broker.toml" -n "$BROKER_NAMESRV_ADDR" \
            >>"$STATE_DIR/logs/broker.log" 2>&1 </dev/null &
        echo $! >"$STATE_DIR/broker.pid"
    fi
    wait_for "broker (127.0.0.1:$BROKER_PORT)" broker_ready_or_exited || {
        tail -n 30 "$STATE_DIR/logs/broker.log" >&2 || true
        report_ports "$BROKER_PORT" "$((BROKER_PORT - 2))" "$HA_PORT" "$HEALTH_PORT"
        die "broker not ready within ${START_TIMEOUT}s (log: $STATE_DIR/logs/broker.log)"
    }
}

broker_ready_or_exited() { # 0 when ready, 1 while starting; stops the script once the broker died
    broker_ready && return 0
    pid_alive "$STATE_DIR/broker.pid" && return 1
    tail -n 30 "$STATE_DIR/logs/broker.log" >&2 || true
    report_ports "$BROKER_PORT" "$((BROKER_PORT - 2))" "$HA_PORT" "$HEALTH_PORT"
    die "the broker exited before it was ready (log: $STATE_DIR/logs/broker.log)"
}

STOP_KILLED=0 # set to 1 by stop_one when a process needed SIGKILL
stop_one() { # name pidfile signal
    local name=$1 f=$2 sig=${3:-TERM} pid
    if ! pid_alive "$f"; then
        rm -f "$f"
        return 0
    fi
    pid=$(cat "$f")
    log "stopping $name (pid $pid, SIG$sig)"
    # A paused (SIGSTOPped) process acts on SIGTERM only once it runs again.
    [[ $sig == KILL ]] || kill -CONT "$pid" 2>/dev/null || true
    kill -"$sig" "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + 20))
    while kill -0 "$pid" 2>/dev/null; do
        if ((SECONDS >= deadline)); then
            log "$name did not exit within 20s; SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            STOP_KILLED=1
            deadline=$((SECONDS + 5))
        fi
        sleep 0.1
    done
    rm -f "$f"
}

wait_port_closed() { # port
    local deadline=$((SECONDS + 10))
    while port_open "$1" && ((SECONDS < deadline)); do sleep 0.1; done
}

cmd_start() {
    if namesrv_up && broker_ready; then
        log "already running (name server 127.0.0.1:$NAMESRV_PORT, broker 127.0.0.1:$BROKER_PORT)"
        return 0
    fi
    cmd_install
    write_configs
    start_namesrv
    start_broker
    log "running: ROCKETMQ_NAMESRV_ADDR=127.0.0.1:$NAMESRV_PORT (state and logs in $STATE_DIR)"
}

cmd_stop() {
    settle_cleanup
    stop_one broker "$STATE_DIR/broker.pid" TERM
    stop_one "name server" "$STATE_DIR/namesrv.pid" TERM
    wait_port_closed "$BROKER_PORT"
    wait_port_closed "$NAMESRV_PORT"
    log "stopped"
}

cmd_status() {
    local ok=0
    if namesrv_up; then
        echo "name server: up (127.0.0.1:$NAMESRV_PORT)"
    else
        echo "name server: down (127.0.0.1:$NAMESRV_PORT)"
        ok=1
    fi
    if broker_ready; then
        echo "broker: ready (127.0.0.1:$BROKER_PORT, health 127.0.0.1:$HEALTH_PORT)"
    else
        echo "broker: not ready (127.0.0.1:$BROKER_PORT, health 127.0.0.1:$HEALTH_PORT)"
        ok=1
    fi
    return $ok
}

# ---- the two-broker cluster ----------------------------------------------------------------------
# Each part (name server 1 or 2, broker a or b) is a single instance of this script with its own
# state directory and ports: the cluster commands run this script again on that part with the
# internal commands `_namesrv-start`, `_broker-start`, `_stop`, `_signal`, `_status`.
CLUSTER_DIR=${ROCKETMQ_CLUSTER_DIR:-/tmp/outbox-rocketmq-cluster}
C_NS1=${ROCKETMQ_CLUSTER_NAMESRV_PORT_1:-21876}
C_NS2=${ROCKETMQ_CLUSTER_NAMESRV_PORT_2:-21877}
C_BROKER_A=${ROCKETMQ_CLUSTER_BROKER_PORT_A:-22911}
C_BROKER_B=${ROCKETMQ_CLUSTER_BROKER_PORT_B:-22931}
C_HEALTH_A=${ROCKETMQ_CLUSTER_HEALTH_PORT_A:-22990}
C_HEALTH_B=${ROCKETMQ_CLUSTER_HEALTH_PORT_B:-22991}
CLUSTER_ADDR="127.0.0.1:$C_NS1;127.0.0.1:$C_NS2"

on_part() { # part (1|2|a|b), internal command...: runs this script on that part of the cluster
    local part=$1; shift
    case $part in
        1 | 2)
            local port=$C_NS1
            [[ $part == 2 ]] && port=$C_NS2
            ROCKETMQ_STATE_DIR="$CLUSTER_DIR/namesrv-$part" ROCKETMQ_NAMESRV_PORT=$port \
                bash "$0" "$@"
            ;;
        a | b)
            local port=$C_BROKER_A health=$C_HEALTH_A
            [[ $part == b ]] && port=$C_BROKER_B health=$C_HEALTH_B
            # NAMESRV_PORT only places the settle pass's own name server (+SETTLE_OFFSET).
            ROCKETMQ_STATE_DIR="$CLUSTER_DIR/broker-$part" ROCKETMQ_NAMESRV_PORT=$C_NS1 \
                ROCKETMQ_BROKER_PORT=$port ROCKETMQ_HA_PORT=$((port + 1)) \
                ROCKETMQ_HEALTH_PORT=$health ROCKETMQ_BROKER_NAME="broker-$part" \
                ROCKETMQ_BROKER_NAMESRV_ADDR="$CLUSTER_ADDR" bash "$0" "$@"
            ;;
        *) die "unknown cluster part '$part' (name servers: 1, 2; brokers: a, b)" ;;
    esac
}

broker_part() { [[ ${1:-} == a || ${1:-} == b ]] || die "give the broker: a or b"; }
namesrv_part() { [[ ${1:-} == 1 || ${1:-} == 2 ]] || die "give the name server: 1 or 2"; }

cmd_signal() { # component (broker|namesrv) signal: sends it to the part's process
    local f="$STATE_DIR/$1.pid"
    pid_alive "$f" || die "$1 of $STATE_DIR is not running"
    kill -"$2" "$(cat "$f")"
    log "sent SIG$2 to the $1 (pid $(cat "$f"))"
}

cmd_part_status() { # component (broker|namesrv): one line
    local f="$STATE_DIR/$1.pid" state
    if [[ $1 == namesrv ]]; then
        if namesrv_up; then echo "name server 127.0.0.1:$NAMESRV_PORT: up"; return 0; fi
        echo "name server 127.0.0.1:$NAMESRV_PORT: down"; return 1
    fi
    if pid_alive "$f"; then
        state=$(awk '{print $3}' "/proc/$(cat "$f")/stat" 2>/dev/null || true)
        if [[ $state == T ]]; then
            echo "$BROKER_NAME 127.0.0.1:$BROKER_PORT: paused (SIGSTOP; resume with broker-resume)"
            return 1
        fi
    fi
    if broker_ready; then
        echo "$BROKER_NAME 127.0.0.1:$BROKER_PORT: ready (health 127.0.0.1:$HEALTH_PORT)"
        return 0
    fi
    echo "$BROKER_NAME 127.0.0.1:$BROKER_PORT: not ready"
    return 1
}

cmd_cluster_start() {
    cmd_install
    local p
    for p in 1 2; do on_part "$p" _namesrv-start; done
    for p in a b; do on_part "$p" _broker-start; done
    log "cluster running: ROCKETMQ_NAMESRV_ADDR=\"$CLUSTER_ADDR\" (state and logs in $CLUSTER_DIR)"
}

cmd_cluster_stop() {
    local p
    for p in a b; do on_part "$p" _stop broker; done
    for p in 1 2; do on_part "$p" _stop namesrv; done
    log "cluster stopped"
}

cmd_cluster_status() {
    local ok=0 p
    for p in 1 2; do on_part "$p" _status namesrv || ok=1; done
    for p in a b; do on_part "$p" _status broker || ok=1; done
    return $ok
}

case "${1:-}" in
    install) cmd_install ;;
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    stop-broker) stop_one broker "$STATE_DIR/broker.pid" TERM; wait_port_closed "$BROKER_PORT" ;;
    kill-broker) stop_one broker "$STATE_DIR/broker.pid" KILL; wait_port_closed "$BROKER_PORT" ;;
    cluster-start) cmd_cluster_start ;;
    cluster-stop) cmd_cluster_stop ;;
    cluster-status) cmd_cluster_status ;;
    broker-start) broker_part "${2:-}"; on_part "$2" _broker-start ;;
    broker-stop) broker_part "${2:-}"; on_part "$2" _stop broker TERM ;;
    broker-kill) broker_part "${2:-}"; on_part "$2" _stop broker KILL ;;
    broker-pause) broker_part "${2:-}"; on_part "$2" _signal broker STOP ;;
    broker-resume) broker_part "${2:-}"; on_part "$2" _signal broker CONT ;;
    namesrv-start) namesrv_part "${2:-}"; on_part "$2" _namesrv-start ;;
    namesrv-stop) namesrv_part "${2:-}"; on_part "$2" _stop namesrv TERM ;;
    namesrv-kill) namesrv_part "${2:-}"; on_part "$2" _stop namesrv KILL ;;
    # Internal: one part of the cluster (see on_part).
    _namesrv-start) write_configs; start_namesrv ;;
    _broker-start) write_configs; start_broker ;;
    _stop)
        if [[ $2 == broker ]]; then
            settle_cleanup
            stop_one "$BROKER_NAME" "$STATE_DIR/broker.pid" "${3:-TERM}"
            wait_port_closed "$BROKER_PORT"
        else
            stop_one "name server 127.0.0.1:$NAMESRV_PORT" "$STATE_DIR/namesrv.pid" "${3:-TERM}"
            wait_port_closed "$NAMESRV_PORT"
        fi
        ;;
    _signal) cmd_signal "$2" "$3" ;;
    _status) cmd_part_status "$2" ;;
    *)
        echo "usage: $0 install|start|stop|status|stop-broker|kill-broker" >&2
        echo "       $0 cluster-start|cluster-stop|cluster-status" >&2
        echo "       $0 broker-start|broker-stop|broker-kill|broker-pause|broker-resume a|b" >&2
        echo "       $0 namesrv-start|namesrv-stop|namesrv-kill 1|2" >&2
        exit 2
        ;;
esac
