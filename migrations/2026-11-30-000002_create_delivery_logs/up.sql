-- One row per event per webhook: a delivery record, not an attempt record.
-- It holds the request frozen at emit time (never a secret), so a retry
-- replays the event as it happened.
CREATE TABLE webhook_request_logs (
    id               BIGSERIAL PRIMARY KEY,
    -- Producer-assigned, sent as `webhook-id`: the receiver's dedup key.
    event_id         TEXT NOT NULL,
    -- NULL once the webhook is deleted; the row keeps its name.
    webhook_id       BIGINT REFERENCES webhooks (id) ON DELETE SET NULL,
    webhook_name     TEXT NOT NULL,
    entity_type      TEXT NOT NULL,
    entity_name      TEXT NOT NULL,
    event            TEXT NOT NULL,
    url              TEXT NOT NULL,
    method           TEXT NOT NULL,
    -- Static headers and Content-Type as sent; signing headers are added
    -- afresh on every attempt and never stored.
    headers          JSONB NOT NULL DEFAULT '[]',
    body             TEXT NOT NULL,
    -- The queue at emit time; the webhook's current queue wins while it exists.
    queue            TEXT NOT NULL,
    status           TEXT NOT NULL
        CHECK (status IN ('Queued', 'Delivered', 'Failed', 'Exhausted')),
    attempts         INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    -- 1 + max_retries at emit; a manual replay of an Exhausted row raises it.
    max_attempts     INTEGER NOT NULL CHECK (max_attempts >= 1),
    next_retry       TIMESTAMPTZ,
    -- Set while a worker holds the row (claimed, request in flight).
    lease_expires_at TIMESTAMPTZ,
    response_code    INTEGER,
    response_body    TEXT,
    error            TEXT,
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- Every row that is not terminal has a time at which the sweeper looks at
    -- it again; no terminal row has one.
    CONSTRAINT next_retry_iff_pending
        CHECK ((status IN ('Queued', 'Failed')) = (next_retry IS NOT NULL)),
    CONSTRAINT one_row_per_event_and_webhook UNIQUE (event_id, webhook_id)
-- Room on each page for the claim's in-place (HOT) update of a row.
) WITH (fillfactor = 85);

-- The sweeper's only query walks this index in order: it stays small
-- (pending rows only) however large the table grows, and (next_retry, id) is
-- exactly the sweeper's order and paging key.
CREATE INDEX webhook_request_logs_due ON webhook_request_logs (next_retry, id)
    WHERE next_retry IS NOT NULL;
-- Every update of a row maintains every index, twice per delivery: only the
-- indexes the hot paths or the operator's usual questions need. (Listing by
-- status walks the primary key backwards and filters.)
CREATE INDEX webhook_request_logs_by_webhook ON webhook_request_logs (webhook_name, id);

-- Every attempt, so "what happened to this event" has an answer.
CREATE TABLE webhook_delivery_attempts (
    log_id         BIGINT NOT NULL REFERENCES webhook_request_logs (id) ON DELETE CASCADE,
    attempt        INTEGER NOT NULL CHECK (attempt >= 1),
    started_at     TIMESTAMPTZ NOT NULL,
    duration_ms    INTEGER NOT NULL,
    response_code  INTEGER,
    error          TEXT,
    worker         TEXT NOT NULL,
    PRIMARY KEY (log_id, attempt)
);
