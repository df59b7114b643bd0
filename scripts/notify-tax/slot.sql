BEGIN;
INSERT INTO t_event_record (biz_no, event_type, payload, status, retry_count, next_retry_time, create_time, update_time) VALUES ('W-' || :client_id, 'ORDER_CREATED', '{"orderId":1}', 'WAIT', 0, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP) RETURNING id, CASE WHEN pg_try_advisory_xact_lock(1329745752, (floor(extract(epoch FROM clock_timestamp()) * 1000 / 10::bigint)::bigint % 2147483647)::int) THEN pg_notify('sea_orm_outbox', '') IS NOT NULL ELSE false END AS notified;
COMMIT;
