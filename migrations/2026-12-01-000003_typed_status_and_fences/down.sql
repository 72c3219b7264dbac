DROP INDEX webhook_request_logs_orphans_by_name;
DROP INDEX webhook_request_logs_by_webhook_id;
CREATE INDEX webhook_request_logs_by_webhook ON webhook_request_logs (webhook_name, id);
ALTER TABLE webhook_request_logs
    DROP CONSTRAINT next_retry_iff_pending,
    DROP COLUMN claim_token,
    ALTER COLUMN response_body TYPE text USING encode(response_body, 'escape'),
    ALTER COLUMN status TYPE text USING status::text,
    ADD CONSTRAINT webhook_request_logs_status_check
        CHECK (status IN ('Queued', 'Delivered', 'Failed', 'Exhausted')),
    ADD CONSTRAINT next_retry_iff_pending
        CHECK ((status IN ('Queued', 'Failed')) = (next_retry IS NOT NULL));
DROP TYPE delivery_status;
