-- The console's overview charts attempts per minute over the last hour.
-- Attempts are only ever inserted, at about the time they started, so a
-- BRIN index (a few pages for millions of rows, next to nothing per
-- insert) finds the last hour without reading the table.
CREATE INDEX webhook_delivery_attempts_started_brin
    ON webhook_delivery_attempts USING brin (started_at);
