-- A subscription: which events of which entity type go where, and how the
-- request is built. Validation lives in hookfleet-core (clear messages); the
-- CHECKs here are the last line for anything written by hand.
CREATE TABLE webhooks (
    id                          BIGSERIAL PRIMARY KEY,
    name                        TEXT NOT NULL UNIQUE,
    entity_type                 TEXT NOT NULL,
    event                       TEXT NOT NULL,
    request_url                 TEXT NOT NULL,
    dynamic_url                 BOOLEAN NOT NULL DEFAULT FALSE,
    request_method              TEXT NOT NULL DEFAULT 'POST'
        CHECK (request_method IN ('POST', 'PUT', 'PATCH', 'DELETE', 'GET')),
    request_structure           TEXT NOT NULL DEFAULT 'json'
        CHECK (request_structure IN ('json', 'form')),
    body_template               TEXT,
    -- [{"field": "customer", "key": "customer_name"}, ...]
    fields                      JSONB NOT NULL DEFAULT '[]',
    -- [{"key": "X-Api-Key", "value": "..."}, ...]
    headers                     JSONB NOT NULL DEFAULT '[]',
    condition                   TEXT,
    enabled                     BOOLEAN NOT NULL DEFAULT TRUE,
    secret                      TEXT,
    -- While a secret is being rotated the old one keeps signing (Standard
    -- Webhooks lists one signature per active secret) until this time.
    previous_secret             TEXT,
    previous_secret_expires_at  TIMESTAMPTZ,
    timeout_ms                  INTEGER NOT NULL DEFAULT 5000
        CHECK (timeout_ms > 0 AND timeout_ms <= 60000),
    queue                       TEXT NOT NULL DEFAULT 'default',
    max_retries                 INTEGER NOT NULL DEFAULT 3 CHECK (max_retries >= 0),
    -- Most requests in flight to this webhook per worker process; NULL: the
    -- worker's --endpoint-concurrency.
    max_concurrency             INTEGER CHECK (max_concurrency > 0),
    created_at                  TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at                  TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE INDEX webhooks_by_entity_event ON webhooks (entity_type, event) WHERE enabled;

-- Producers cache the webhooks; any change to the table, by hookfleet or by
-- hand, bumps this counter and so invalidates every producer's cache.
CREATE TABLE webhook_config_version (
    singleton  BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (singleton),
    version    BIGINT NOT NULL
);
INSERT INTO webhook_config_version (singleton, version) VALUES (TRUE, 1);

CREATE FUNCTION bump_webhook_config_version() RETURNS trigger AS $$
BEGIN
    UPDATE webhook_config_version SET version = version + 1;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER webhooks_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON webhooks
    FOR EACH STATEMENT EXECUTE FUNCTION bump_webhook_config_version();
