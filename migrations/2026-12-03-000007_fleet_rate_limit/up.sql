-- A webhook's fleet-wide rate limit: requests per second from all workers
-- together (`webhook add|update --rate-limit N/s`); NULL: none.
ALTER TABLE webhooks
    ADD COLUMN rate_limit INT4,
    ADD CONSTRAINT rate_limit_positive CHECK (rate_limit IS NULL OR rate_limit > 0);
