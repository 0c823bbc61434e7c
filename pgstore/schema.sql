-- The table of a pgstore.Store. {{table}}, {{key}}, {{state}},
-- {{expires}} and {{index}} are replaced by quoted identifiers.
--
-- key:     the limiter's key as bytes, any bytes: a key of up to 254
--          bytes as it is, a longer one under driver.ShortKey's 255-byte
--          digest form. (Before, a text column: see docs/stores.md to
--          convert such a table.)
-- state:   the policy's opaque state; empty for a row that only exists to
--          be locked (SelectForUpdate inserts it before its first write),
--          which reads as no state.
-- expires: when the state expires, by the database clock (now() of the
--          writing transaction plus the ttl, rounded up to the next whole
--          second, so that a key's writes within one second are HOT);
--          NULL means never. A row with expires <= now() reads as no state
--          and is removed by DeleteExpired.
CREATE TABLE IF NOT EXISTS {{table}} (
	{{key}} bytea PRIMARY KEY,
	{{state}} bytea NOT NULL,
	{{expires}} timestamptz NULL
);

-- DeleteExpired finds expired rows through this index; rows that never
-- expire are left out of it.
CREATE INDEX IF NOT EXISTS {{index}} ON {{table}} ({{expires}})
	WHERE {{expires}} IS NOT NULL;
