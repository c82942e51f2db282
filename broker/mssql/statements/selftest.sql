-- The T-SQL `sbworker selftest --mssql` sends (crates/core/src/selftest/mssql.rs), one per
-- "-- name:" section, each one batch without semicolons. Parameters are @P1, @P2, ...
-- as tiberius binds them. It runs as the worker's login: everything it checks is what
-- that login can do. The round trip's roster work is Rekenserver.selftest (05_handoff.sql).

-- What answers: SQL Server, or sbworker's emulator (which has no catalog to check).
-- name: version_text
SELECT @@VERSION AS version

-- The server, the database and who we are.
-- name: server
SELECT CONVERT(nvarchar(128), SERVERPROPERTY('ProductVersion')) AS version,
       CONVERT(nvarchar(128), SERVERPROPERTY('Edition')) AS edition,
       DB_NAME() AS database_name, SUSER_SNAME() AS login_name, USER_NAME() AS user_name

-- Every permission the worker needs, by name: 1 granted, 0 not, NULL the securable does
-- not exist (or the class is wrong). HAS_PERMS_BY_NAME takes a database-level name
-- (service, contract) in one part, unbracketed. @P1 the side this database is (both,
-- roster, calc: `selftest --side`): the rows of that side and those of every side.
-- name: permissions
SELECT v.securable, v.class, v.permission, HAS_PERMS_BY_NAME(v.securable, v.class, v.permission) AS granted
  FROM (VALUES (N'dbo.loonfactorberekening_reken', N'OBJECT', N'RECEIVE', N'calc'),
               (N'dbo.loonfactorberekening_data', N'OBJECT', N'RECEIVE', N'roster'),
               (N'/Rekenserver/LoonfactorBerekening/RekenService', N'SERVICE', N'SEND', N'calc'),
               (N'/Rekenserver/LoonfactorBerekening/DataService', N'SERVICE', N'SEND', N'roster'),
               (N'/Rekenserver/LoonfactorBerekening/DataContract', N'CONTRACT', N'REFERENCES', N'any'),
               (N'/Rekenserver/LoonfactorBerekening/SleutelContract', N'CONTRACT', N'REFERENCES', N'any'),
               (N'/Rekenserver/LoonfactorBerekening/HerberekenContract', N'CONTRACT', N'REFERENCES', N'any'),
               (N'sbworker.count_attempts', N'OBJECT', N'EXECUTE', N'any'),
               (N'sbworker.note_failure', N'OBJECT', N'EXECUTE', N'any'),
               (N'sbworker.forget_attempts', N'OBJECT', N'EXECUTE', N'any'),
               (N'sbworker.set_aside', N'OBJECT', N'EXECUTE', N'any'),
               (N'sbworker.claim_version', N'OBJECT', N'EXECUTE', N'calc'),
               (N'sbworker.queue_state', N'OBJECT', N'EXECUTE', N'any'),
               (N'sbworker.reader_slot', N'OBJECT', N'EXECUTE', N'any'),
               (N'sbworker.reader_slot_free', N'OBJECT', N'EXECUTE', N'any'),
               (N'sbworker.module_options', N'OBJECT', N'EXECUTE', N'any'),
               (N'sbworker.transport_state', N'OBJECT', N'EXECUTE', N'any'),
               (N'sbworker.heartbeat', N'OBJECT', N'EXECUTE', N'any'),
               (N'sbworker.heartbeat_end', N'OBJECT', N'EXECUTE', N'any'),
               (N'Rekenserver.sla_antwoord_op', N'OBJECT', N'EXECUTE', N'roster'),
               (N'Rekenserver.noteer_fout', N'OBJECT', N'EXECUTE', N'roster'),
               (N'Rekenserver.dialoog_stil', N'OBJECT', N'EXECUTE', N'roster'),
               (N'Rekenserver.selftest', N'OBJECT', N'EXECUTE', N'roster')) AS v(securable, class, permission, side)
 WHERE v.side = N'any' OR @P1 = N'both' OR v.side = @P1

-- The database: broker enabled, compatibility level (OPENJSON needs 130).
-- name: database
SELECT d.is_broker_enabled, d.compatibility_level FROM sys.databases d WHERE d.database_id = DB_ID()

-- One queue: enabled, messages, poison-message handling, activation (no row: no queue).
-- name: queue
EXEC sbworker.queue_state @queue = @P1

-- The SET options of every sbworker module, then the schema collection bound to the
-- Vraag (seen as the owner: sbworker.module_options).
-- name: module_options
EXEC sbworker.module_options

-- The install's version stamp (07_security.sql).
-- name: stamp
SELECT CONVERT(nvarchar(200), p.value) FROM sys.extended_properties p WHERE p.class = 0 AND p.name = N'sbworker_version'

-- A split deployment (`selftest --side roster|calc`): the routes to other services, then
-- the messages waiting in sys.transmission_queue per far service (sbworker.transport_state
-- reads both as the owner).
-- name: transport_state
EXEC sbworker.transport_state

-- This instance's Service Broker endpoint, as the worker's login sees it: a login sees
-- an endpoint's row only with a permission on it (optional/endpoint.sql grants it VIEW
-- DEFINITION). No row: none, or not visible.
-- name: endpoint
SELECT e.name, e.state_desc, t.port, e.connection_auth_desc, e.encryption_algorithm_desc
  FROM sys.service_broker_endpoints e
  LEFT JOIN sys.tcp_endpoints t ON t.endpoint_id = e.endpoint_id

-- The round trip's steps (Rekenserver.selftest).
-- name: step
EXEC Rekenserver.selftest @stap = @P1
