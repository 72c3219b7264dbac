ALTER TABLE webhooks DROP COLUMN releasing;
