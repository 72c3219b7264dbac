DROP TABLE webhook_delivery_attempts;
DROP TABLE webhook_request_logs;
