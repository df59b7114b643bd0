#!/usr/bin/env bash
# The wake-up notify's cost to writers, from a C client (BENCHMARKS.md, "Where the writers' tax
# goes"): pgbench runs one-event transactions with the plain insert (plain.sql), the insert with
# the 10 ms slot's advisory lock but no notify (lock.sql) and the library's default insert as it
# was before 900365b (slot.sql: the slot numbered by clock_timestamp() in the statement; since
# then the writer binds the slot's key as a parameter), ROUNDS rounds alternating the order, SECONDS each, for 8 and 32 clients, in a
# scratch database of its own (dropped at the end). Prints "<script> c<clients> r<round> <tps>".
# Usage: bash scripts/notify-tax/run.sh [ROUNDS=6] [SECONDS=10]   (Postgres on 127.0.0.1:5432)
set -euo pipefail
cd "$(dirname "$0")"
rounds=${1:-6} seconds=${2:-10} db=outbox_notify_tax
psql=(psql -h 127.0.0.1 -U postgres -q)
"${psql[@]}" -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" postgres
trap '"${psql[@]}" -c "DROP DATABASE IF EXISTS $db" postgres' EXIT
"${psql[@]}" "$db" <<'SQL'
CREATE TABLE t_event_record (id bigserial PRIMARY KEY, biz_no varchar(64) NOT NULL,
  event_type varchar(64) NOT NULL, payload text NOT NULL, status varchar(16) NOT NULL,
  retry_count int NOT NULL, next_retry_time timestamptz NOT NULL, create_time timestamptz NOT NULL,
  update_time timestamptz NOT NULL, claim_owner varchar(128), claimed_at timestamptz, headers text);
CREATE INDEX idx_t_event_record_status_next_retry ON t_event_record (status, next_retry_time);
CREATE INDEX idx_t_event_record_status_claimed_at ON t_event_record (status, claimed_at);
CREATE INDEX idx_t_event_record_biz_no_status_id ON t_event_record (biz_no, status, id);
SQL
for r in $(seq 1 "$rounds"); do
  order="plain lock slot"
  if [ $((r % 2)) = 0 ]; then order="slot lock plain"; fi
  for c in 8 32; do
    for s in $order; do
      tps=$(pgbench -n -h 127.0.0.1 -U postgres -M prepared -c "$c" -j 2 -T "$seconds" -f "$s.sql" "$db" 2>&1 \
        | awk '/tps =/ {print $3}')
      echo "$s c$c r$r $tps"
    done
  done
done
