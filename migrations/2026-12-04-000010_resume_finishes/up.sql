-- A resume unpauses the webhook first and then releases its held rows a
-- batch at a time. Set with the unpause and cleared when the last held row
-- is released: a resume cut short (the process stopped, Postgres went away)
-- leaves it set, and the sweeper finishes the release.
ALTER TABLE webhooks ADD COLUMN releasing BOOLEAN NOT NULL DEFAULT false;
