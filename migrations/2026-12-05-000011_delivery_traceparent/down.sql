ALTER TABLE webhook_request_logs DROP COLUMN traceparent;
