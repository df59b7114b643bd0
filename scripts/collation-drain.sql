-- The in-database drain (the bench's `outbox_bench_drain`, examples/bench/limit.rs) over 50,000
-- events in a table whose `status` and `biz_no` have the collation `coll` (BENCHMARKS.md, "The
-- relay's ceiling on this machine: TLS, the profile, collations"). Run in a scratch database,
-- alternating collations, and read the CALL's time:
--   psql -h 127.0.0.1 -U postgres -c 'CREATE DATABASE colltest' postgres
--   for c in default C en-US-x-icu C; do psql -h 127.0.0.1 -U postgres -q colltest -v coll=$c \
--     -f scripts/collation-drain.sql | grep '^Time' | tail -1; done
--   psql -h 127.0.0.1 -U postgres -c 'DROP DATABASE colltest' postgres
CREATE OR REPLACE PROCEDURE outbox_bench_drain(
    p_owner text, p_batch integer, INOUT p_done bigint DEFAULT 0)
LANGUAGE plpgsql AS $proc$
DECLARE
    v_ids bigint[];
    v_bytes bigint;
    v_n bigint;
    v_k bigint := 0;
    v_owner text;
BEGIN
    p_done := 0;
    LOOP
        v_k := v_k + 1;
        v_owner := p_owner || '#' || v_k;
        WITH claimed AS (
            UPDATE t_event_record SET status = 'SENDING', claim_owner = v_owner,
                claimed_at = CURRENT_TIMESTAMP, update_time = CURRENT_TIMESTAMP
            WHERE status = 'WAIT' AND id = ANY(ARRAY(
                SELECT id FROM t_event_record
                WHERE status = 'WAIT' AND next_retry_time <= CURRENT_TIMESTAMP
                ORDER BY next_retry_time LIMIT p_batch FOR UPDATE SKIP LOCKED))
            RETURNING id, biz_no, event_type, payload, retry_count)
        SELECT array_agg(id), sum(length(biz_no) + length(event_type) + length(payload) + retry_count)
            INTO v_ids, v_bytes FROM claimed;
        EXIT WHEN v_ids IS NULL;
        UPDATE t_event_record SET status = 'SUCCESS', update_time = CURRENT_TIMESTAMP
            WHERE status = 'SENDING' AND claim_owner = v_owner AND id = ANY(v_ids);
        GET DIAGNOSTICS v_n = ROW_COUNT;
        p_done := p_done + v_n;
        COMMIT;
    END LOOP;
END
$proc$;

DROP TABLE IF EXISTS t_event_record;
CREATE TABLE t_event_record (id bigserial PRIMARY KEY, biz_no varchar(64) COLLATE :"coll" NOT NULL,
  event_type varchar(64) NOT NULL, payload text NOT NULL, status varchar(16) COLLATE :"coll" NOT NULL,
  retry_count int NOT NULL, next_retry_time timestamptz NOT NULL, create_time timestamptz NOT NULL,
  update_time timestamptz NOT NULL, claim_owner varchar(128), claimed_at timestamptz, headers text);
CREATE INDEX idx_t_event_record_status_next_retry ON t_event_record (status, next_retry_time);
CREATE INDEX idx_t_event_record_status_claimed_at ON t_event_record (status, claimed_at);
CREATE INDEX idx_t_event_record_biz_no_status_id ON t_event_record (biz_no, status, id);
INSERT INTO t_event_record (biz_no, event_type, payload, status, retry_count, next_retry_time, create_time, update_time)
 SELECT 'ORDER-' || g, 'ORDER_CREATED', '{"orderId":' || g || ',"amount":100}', 'WAIT', 0, now() - interval '1 hour' + g * interval '1 ms', now(), now() FROM generate_series(1, 50000) g;
VACUUM ANALYZE t_event_record;
CHECKPOINT;
\timing on
CALL outbox_bench_drain('o', 100);
