ALTER TABLE webhooks
    DROP CONSTRAINT rate_limit_positive,
    DROP COLUMN rate_limit;
