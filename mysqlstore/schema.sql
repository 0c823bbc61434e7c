-- The table of a mysqlstore.Store. The names in double braces are
-- replaced by quoted identifiers.
--
-- key:     the limiter's key, compared byte for byte (no collation folds
--          case or trailing spaces); at most 255 bytes.
-- state:   the policy's opaque state, at most 16 MiB - 1 (MEDIUMBLOB);
--          empty for a row that only exists to be locked, which reads as
--          no state.
-- expires: when the state expires, in UTC by the database clock
--          (UTC_TIMESTAMP(6) of the writing statement plus the ttl, rounded
--          up to microseconds), so that sessions with different time_zone
--          settings agree; NULL means never. A row with
--          expires <= UTC_TIMESTAMP(6) reads as no state and is removed by
--          DeleteExpired, which finds it through the index.
CREATE TABLE IF NOT EXISTS {{table}} (
	{{key}} VARBINARY(255) NOT NULL,
	{{state}} MEDIUMBLOB NOT NULL,
	{{expires}} DATETIME(6) NULL,
	PRIMARY KEY ({{key}}),
	INDEX ({{expires}}) -- named after the column
) ENGINE=InnoDB
