-- "Did you send us order SO-1?": the console's and the API's search by a
-- document's name. Without an index it walks the table newest first (about
-- 0.1 s per million rows, so a retained month of a busy fleet times out).
-- The price is one more index entry per outcome write (the update is not
-- HOT): about 2-3% of drain and end-to-end throughput, measured
-- (docs/PERFORMANCE.md, "The console at 1 million rows").
CREATE INDEX webhook_request_logs_by_document ON webhook_request_logs (entity_name, id);
