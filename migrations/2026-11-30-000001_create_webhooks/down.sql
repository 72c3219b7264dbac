DROP TRIGGER webhooks_changed ON webhooks;
DROP FUNCTION bump_webhook_config_version();
DROP TABLE webhook_config_version;
DROP TABLE webhooks;
