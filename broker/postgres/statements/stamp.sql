-- The install's version stamp (src/broker/postgres/, after the scripts): this
-- sbworker's version and a hash of the part's scripts, for `sbworker selftest`.
-- $1 the part (broker, roster), $2 the stamp.

-- name: record_stamp
INSERT INTO sbworker.installation (part, stamp) VALUES ($1, $2)
    ON CONFLICT (part) DO UPDATE SET stamp = EXCLUDED.stamp, installed_at = clock_timestamp();
