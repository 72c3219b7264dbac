-- Whether a webhook's body is sent as Frappe would send it: values inside
-- a template's quotes written as Python writes them (None, True, ['a']),
-- and the JSON as Python's json.dumps writes it (", " and ": ", \uXXXX for
-- anything past ASCII), so a receiver that compares bytes with a Frappe
-- sender sees none change. `webhook import` sets it. A constant default:
-- adding the column rewrites nothing.
ALTER TABLE webhooks ADD COLUMN frappe_body BOOLEAN NOT NULL DEFAULT false;
