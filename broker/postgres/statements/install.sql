-- The statements of `sbworker install --postgres` (crates/core/src/broker/postgres/install.rs),
-- around the scripts of `broker/postgres/`. Parameters are $1, $2, ... as in the Rust
-- calls.

-- The install's transaction: its notices (IF NOT EXISTS, say) quiet, and no lock waited
-- for longer than 5 s. Behind a session idle in a transaction it would otherwise wait for
-- ever, and every planner and worker queued behind its locks with it; it gives up
-- (55P03) and is run again.
-- name: quiet_notices
SET LOCAL client_min_messages = warning;
SET LOCAL lock_timeout = '5s';

-- The install's version stamp: this sbworker's version and a hash of the part's
-- scripts, for `sbworker selftest`. $1 the part (broker, roster), $2 the stamp.
-- name: record_stamp
INSERT INTO sbworker.installation (part, stamp) VALUES ($1, $2)
    ON CONFLICT (part) DO UPDATE SET stamp = EXCLUDED.stamp, installed_at = clock_timestamp();

-- `--worker-role LOGIN` and the like: one of sbworker's group roles to an existing
-- login. $1 the role, $2 the login.
-- name: grant_role
SELECT sb.grant_role($1, $2);
