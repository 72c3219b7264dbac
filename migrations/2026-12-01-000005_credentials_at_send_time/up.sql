-- Hosts a dynamic URL may render to (host or host:port); empty: the host
-- written literally in the URL template.
ALTER TABLE webhooks ADD COLUMN allowed_hosts TEXT[] NOT NULL DEFAULT '{}';

-- Delivery rows freeze the body and the URL, never a credential: static
-- headers are read from the webhook at send time (so a rotated token reaches
-- pending retries), and rows keep only the Content-Type of their body.
UPDATE webhook_request_logs
SET headers = COALESCE(
        (SELECT jsonb_agg(h)
         FROM jsonb_array_elements(headers) h
         WHERE lower(h->>'key') = 'content-type'),
        '[]'::jsonb)
WHERE EXISTS (SELECT 1 FROM jsonb_array_elements(headers) h
              WHERE lower(h->>'key') <> 'content-type');
