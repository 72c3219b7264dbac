DROP INDEX IF EXISTS webhook_request_logs_by_document;
