-- Held rows are due again at once.
UPDATE webhook_request_logs SET next_retry = now() WHERE next_retry = '9999-01-01 00:00:00+00';
DROP TABLE webhook_health_hourly;
DROP TABLE webhook_health;
ALTER TABLE webhooks
    DROP CONSTRAINT paused_reason_iff_paused,
    DROP COLUMN paused_reason,
    DROP COLUMN paused_at;
