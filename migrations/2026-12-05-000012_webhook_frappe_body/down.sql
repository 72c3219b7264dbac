ALTER TABLE webhooks DROP COLUMN frappe_body;
