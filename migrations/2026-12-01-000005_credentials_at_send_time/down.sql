ALTER TABLE webhooks DROP COLUMN allowed_hosts;
