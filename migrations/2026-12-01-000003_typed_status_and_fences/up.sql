-- A delivery's status is one of four values: an enum, so a row can never hold
-- a fifth one and no reader needs a fallback for an unknown string.
CREATE TYPE delivery_status AS ENUM ('Queued', 'Delivered', 'Failed', 'Exhausted');

-- One rewrite of the table for all three column changes.
-- The CHECKs on the status are written against text: they are dropped and
-- written again against the enum.
ALTER TABLE webhook_request_logs
    DROP CONSTRAINT webhook_request_logs_status_check,
    DROP CONSTRAINT next_retry_iff_pending,
    ALTER COLUMN status TYPE delivery_status USING status::delivery_status,
    -- A receiver's answer is bytes, not text: NUL, invalid UTF-8, gzip or any
    -- binary body is stored as it came (truncated), and can never make the
    -- outcome write fail.
    ALTER COLUMN response_body TYPE bytea USING convert_to(response_body, 'UTF8'),
    -- The fencing token: bumped by every claim and every replay. An outcome
    -- is written only while the row still carries its claim's token, so a
    -- late outcome of an earlier attempt can never overwrite a replay.
    ADD COLUMN claim_token BIGINT NOT NULL DEFAULT 0,
    ADD CONSTRAINT next_retry_iff_pending
        CHECK ((status IN ('Queued', 'Failed')) = (next_retry IS NOT NULL));

-- Rows carry the token their claim counted up to: a row claimed before this
-- migration keeps its attempt count as its token.
UPDATE webhook_request_logs SET claim_token = attempts WHERE status IN ('Queued', 'Failed');

-- Lists and replays select a webhook's rows by its id (a renamed webhook's
-- old rows are still its rows), and deleting a webhook sets its rows'
-- webhook_id to NULL: both need this index. Rows of deleted webhooks keep
-- their name, found through a small partial index.
DROP INDEX webhook_request_logs_by_webhook;
CREATE INDEX webhook_request_logs_by_webhook_id ON webhook_request_logs (webhook_id, id);
CREATE INDEX webhook_request_logs_orphans_by_name ON webhook_request_logs (webhook_name, id)
    WHERE webhook_id IS NULL;
