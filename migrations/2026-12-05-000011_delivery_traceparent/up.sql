-- The W3C trace context an event was emitted in (`00-<trace>-<span>-<flags>`,
-- 55 characters): the application's own when it sent one, else the emit's
-- span when tracing is on. Each attempt's span is its child, so one trace
-- runs from the emit through every retry to the outcome. NULL when neither
-- (the column is nullable without a default: adding it rewrites nothing).
ALTER TABLE webhook_request_logs ADD COLUMN traceparent TEXT;
