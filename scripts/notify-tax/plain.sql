BEGIN;
INSERT INTO t_event_record (biz_no, event_type, payload, status, retry_count, next_retry_time, create_time, update_time) VALUES ('W-' || :client_id, 'ORDER_CREATED', '{"orderId":1}', 'WAIT', 0, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP) RETURNING id;
COMMIT;
