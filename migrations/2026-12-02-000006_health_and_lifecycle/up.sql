-- Pause: a paused webhook's events are still recorded, but nothing is sent
-- and nothing becomes Exhausted because of the pause; its pending rows wait
-- for `webhook resume`. The reason says who paused it (an operator, or the
-- auto-pause of a receiver that has failed for days).
ALTER TABLE webhooks
    ADD COLUMN paused_at     TIMESTAMPTZ,
    ADD COLUMN paused_reason TEXT,
    ADD CONSTRAINT paused_reason_iff_paused CHECK ((paused_at IS NULL) = (paused_reason IS NULL));

-- Each webhook's health, kept by the workers as they record outcomes (one
-- upsert per webhook per batch of outcomes), so `webhook list|show` never
-- read the attempts. No foreign key: a webhook deleted while a worker
-- records its last outcomes must never make that write fail; deleting a
-- webhook deletes its rows here, and the sweeper removes any left behind.
CREATE TABLE webhook_health (
    webhook_id            BIGINT PRIMARY KEY,
    -- Failed attempts since the last success.
    consecutive_failures  INTEGER NOT NULL DEFAULT 0,
    -- When the first of those failed attempts started (NULL: none).
    failing_since         TIMESTAMPTZ,
    last_success_at       TIMESTAMPTZ,
    last_error            TEXT,
    last_attempt_at       TIMESTAMPTZ
);

-- Attempts per webhook per clock hour, by latency bucket (the bounds are in
-- hookfleet-core's store::health): success rate and percentiles of the last
-- 24 hours are sums over at most 24 hours x the buckets hit. Rows older than
-- a day are deleted by the sweeper.
CREATE TABLE webhook_health_hourly (
    webhook_id  BIGINT NOT NULL,
    hour        TIMESTAMPTZ NOT NULL,
    bucket      SMALLINT NOT NULL,
    attempts    INTEGER NOT NULL,
    successes   INTEGER NOT NULL,
    PRIMARY KEY (webhook_id, hour, bucket)
);
CREATE INDEX webhook_health_hourly_by_hour ON webhook_health_hourly (hour);

-- A paused webhook's rows are held: their next_retry is moved to
-- 9999-01-01 (store::deliveries::HELD_UNTIL), past every sweeper's "due", so
-- a paused backlog of millions costs the sweeper nothing; resume finds them
-- through the sweeper's own index (they share one next_retry, in id order).
-- No index is added for it: every index costs each emit one more entry.
