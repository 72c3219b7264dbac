DROP INDEX webhook_request_logs_by_created;
DROP TABLE webhook_health_hourly;
DROP TABLE webhook_health;
ALTER TABLE webhooks
    DROP CONSTRAINT paused_reason_iff_paused,
    DROP COLUMN paused_reason,
    DROP COLUMN paused_at;
