-- The statements of `sbworker link` (crates/core/src/broker/postgres/route.rs): the routes,
-- publications, replication slots and subscriptions that join the two sides of a split
-- install (008_routes.sql). Parameters are $1, $2, ... as in the Rust calls.

-- This database's broker id and side.
-- name: broker_instance
SELECT id, side FROM sb.broker_instance;

-- The publication of route $1's messages (first: the route's slot is made after it).
-- name: publish_route
SELECT sb.publish_route($1);

-- CREATE ROUTE $1 for service $2 at broker $3 (address $4, for people): last, once its
-- publication, slot and far subscription exist (dialogs take it at once).
-- name: create_route
SELECT sb.create_route($1, $2, $3, $4);

-- Whether the replication slot $1 exists.
-- name: slot_exists
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_replication_slots WHERE slot_name = $1);

-- The replication slot a route's subscriber reads, made at the publishing database
-- (outside a transaction: a slot waits for the transactions running when it is made).
-- $1 the slot's name.
-- name: create_slot
SELECT pg_catalog.pg_create_logical_replication_slot($1, 'pgoutput')
 WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_replication_slots WHERE slot_name = $1);

-- The subscription to the far database's route $1, by connection $2.
-- name: subscribe
SELECT sb.subscribe($1, $2);

-- What the server offers logical replication: wal_level, and the slots and senders it
-- allows and uses.
-- name: replication_settings
SELECT current_setting('wal_level'), current_setting('max_replication_slots')::int,
       (SELECT count(*)::int FROM pg_catalog.pg_replication_slots),
       current_setting('max_wal_senders')::int;
