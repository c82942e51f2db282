-- sbworker on SQL Server, script 02: the worker's bookkeeping (as 002_worker.sql and
-- sbworker.answered_version on PostgreSQL), behind procedures the worker EXECUTEs.
-- Keys of messages travel as JSON: [{"h":"<conversation_handle>","s":<sequence>}, ...].
-- Sides (docs/sqlserver.md, "Two databases, two servers"): a worker serves a queue on
-- each side (the calculation where RekenService is, the collector where DataService is),
-- so attempts, dead letters, reader slots and the queue's state are made on every side;
-- the answered-version claim is the calculation's only.

:on error exit
-- The SET options every module here needs, whatever client runs the script (the ODBC
-- sqlcmd turns QUOTED_IDENTIFIER off without -I): procedures, functions and triggers
-- keep QUOTED_IDENTIFIER and ANSI_NULLS as they were at CREATE; xml methods, filtered
-- indexes and indexed views need all seven. Parse-time options: a batch of their own.
SET ANSI_NULLS ON;
SET ANSI_PADDING ON;
SET ANSI_WARNINGS ON;
SET ARITHABORT ON;
SET CONCAT_NULL_YIELDS_NULL ON;
SET QUOTED_IDENTIFIER ON;
SET NUMERIC_ROUNDABORT OFF;
GO
USE [$(Database)];
GO
IF '$(Side)' NOT IN ('both', 'roster', 'calc')
    THROW 50032, N'The sqlcmd variable Side must be both, roster or calc (-v Side=both): nothing was changed.', 1;
GO

-- Earlier versions named these procedures in Dutch (tel_pogingen, noteer_mislukking,
-- vergeet_pogingen, zet_apart, claim_versie, wachtrij_status): the old ones go, their
-- English successors are created below, and 07_security.sql grants those.
IF OBJECT_ID(N'sbworker.tel_pogingen', N'P') IS NOT NULL DROP PROCEDURE sbworker.tel_pogingen;
IF OBJECT_ID(N'sbworker.noteer_mislukking', N'P') IS NOT NULL DROP PROCEDURE sbworker.noteer_mislukking;
IF OBJECT_ID(N'sbworker.vergeet_pogingen', N'P') IS NOT NULL DROP PROCEDURE sbworker.vergeet_pogingen;
IF OBJECT_ID(N'sbworker.zet_apart', N'P') IS NOT NULL DROP PROCEDURE sbworker.zet_apart;
IF OBJECT_ID(N'sbworker.claim_versie', N'P') IS NOT NULL DROP PROCEDURE sbworker.claim_versie;
IF OBJECT_ID(N'sbworker.wachtrij_status', N'P') IS NOT NULL DROP PROCEDURE sbworker.wachtrij_status;
GO

IF OBJECT_ID(N'sbworker.message_attempt', N'U') IS NULL
    CREATE TABLE sbworker.message_attempt (
        conversation_handle     uniqueidentifier NOT NULL,
        message_sequence_number bigint NOT NULL,
        queue                   sysname NOT NULL,
        attempts                int NOT NULL,
        last_error              nvarchar(3000) NULL,
        first_attempt_at        datetime2(3) NOT NULL CONSTRAINT df_attempt_first DEFAULT SYSUTCDATETIME(),
        last_attempt_at         datetime2(3) NOT NULL CONSTRAINT df_attempt_last DEFAULT SYSUTCDATETIME(),
        CONSTRAINT pk_message_attempt PRIMARY KEY (conversation_handle, message_sequence_number));
GO

-- What the attempts died of (see broker/postgres/002_worker.sql for the rules): failures
-- by the message's fault count toward diversion; transient failures (the environment's
-- fault: deadlock, lock timeout, a lost connection, a failover) are given back.
IF COL_LENGTH(N'sbworker.message_attempt', N'failures') IS NULL
    ALTER TABLE sbworker.message_attempt ADD
        failures             int NOT NULL CONSTRAINT df_attempt_failures DEFAULT 0,
        transient_failures   int NOT NULL CONSTRAINT df_attempt_transient DEFAULT 0,
        last_transient_error nvarchar(3000) NULL;
GO

IF OBJECT_ID(N'sbworker.dead_letter', N'U') IS NULL
    CREATE TABLE sbworker.dead_letter (
        id                      bigint IDENTITY PRIMARY KEY,
        queue                   sysname NOT NULL,
        service_name            nvarchar(512) NOT NULL,
        service_contract_name   nvarchar(256) NOT NULL,
        conversation_group_id   uniqueidentifier NOT NULL,
        conversation_handle     uniqueidentifier NOT NULL,
        message_sequence_number bigint NOT NULL,
        message_type_name       nvarchar(256) NOT NULL,
        message_body            varbinary(max) NULL,
        attempts                int NOT NULL,
        reason                  nvarchar(3000) NOT NULL,
        dead_lettered_at        datetime2(3) NOT NULL CONSTRAINT df_dead_letter_at DEFAULT SYSUTCDATETIME(),
        INDEX ix_dead_letter_at (dead_lettered_at));
GO

-- Where a diverted message came from (to send it again: `sbworker dead-letter replay`)
-- and its replays.
IF COL_LENGTH(N'sbworker.dead_letter', N'far_service') IS NULL
    ALTER TABLE sbworker.dead_letter ADD
        far_service   nvarchar(256) NULL,
        replays       int NOT NULL CONSTRAINT df_dead_letter_replays DEFAULT 0,
        replayed_at   datetime2(3) NULL,
        replayed_by   nvarchar(512) NULL,
        replay_handle uniqueidentifier NULL;
GO

-- Which side of a split install this database holds, as the install's sqlcmd variable
-- Side said: `export`, `recompute` and `explain` refuse the calculation side, and `sweep`
-- has nothing to do there (crates/core/src/broker/database.rs). Granted to each of
-- sbworker's roles in 07_security.sql: every subcommand's login reads it.
CREATE OR ALTER PROCEDURE sbworker.side
AS
BEGIN
    SET NOCOUNT ON;
    SELECT CAST(N'$(Side)' AS nvarchar(10)) AS side;
END;
GO


-- Counts one more attempt of each message (called on a connection outside the
-- receiving transaction, so it commits at once); returns the counts after this one.
CREATE OR ALTER PROCEDURE sbworker.count_attempts @queue sysname, @keys nvarchar(max)
AS
BEGIN
    SET NOCOUNT ON; SET XACT_ABORT ON;
    DECLARE @k TABLE (h uniqueidentifier NOT NULL, s bigint NOT NULL, PRIMARY KEY (h, s));
    INSERT @k (h, s) SELECT DISTINCT h, s FROM OPENJSON(@keys) WITH (h uniqueidentifier '$.h', s bigint '$.s');
    MERGE sbworker.message_attempt WITH (HOLDLOCK) AS a
    USING @k AS k ON a.conversation_handle = k.h AND a.message_sequence_number = k.s
    WHEN MATCHED THEN UPDATE SET attempts = a.attempts + 1, last_attempt_at = SYSUTCDATETIME()
    WHEN NOT MATCHED THEN INSERT (conversation_handle, message_sequence_number, queue, attempts)
                          VALUES (k.h, k.s, @queue, 1)
    OUTPUT inserted.conversation_handle, inserted.message_sequence_number, inserted.attempts, inserted.last_error,
           inserted.failures, inserted.transient_failures;
END;
GO

-- Records why the last attempt failed. @transient = 1: the environment's fault, whose
-- attempt is given back; 0: the message's, which keeps counting.
CREATE OR ALTER PROCEDURE sbworker.note_failure @keys nvarchar(max), @error nvarchar(3000),
    @transient bit = 0
AS
BEGIN
    SET NOCOUNT ON; SET XACT_ABORT ON;
    UPDATE a
       SET attempts = CASE WHEN @transient = 1 AND a.attempts > 0 THEN a.attempts - 1 ELSE a.attempts END,
           failures = a.failures + CASE WHEN @transient = 1 THEN 0 ELSE 1 END,
           last_error = CASE WHEN @transient = 1 THEN a.last_error ELSE @error END,
           transient_failures = a.transient_failures + CASE WHEN @transient = 1 THEN 1 ELSE 0 END,
           last_transient_error = CASE WHEN @transient = 1 THEN @error ELSE a.last_transient_error END
      FROM sbworker.message_attempt a
      JOIN OPENJSON(@keys) WITH (h uniqueidentifier '$.h', s bigint '$.s') k
        ON a.conversation_handle = k.h AND a.message_sequence_number = k.s;
END;
GO

-- Inside the receiving transaction: the messages are done.
CREATE OR ALTER PROCEDURE sbworker.forget_attempts @keys nvarchar(max)
AS
BEGIN
    SET NOCOUNT ON; SET XACT_ABORT ON;
    DELETE a FROM sbworker.message_attempt a
      JOIN OPENJSON(@keys) WITH (h uniqueidentifier '$.h', s bigint '$.s') k
        ON a.conversation_handle = k.h AND a.message_sequence_number = k.s;
END;
GO

-- Inside the receiving transaction: keeps a diverted message, with the service that
-- sent it (read from its conversation, which still exists; as the owner, since the
-- catalog view shows a caller only what it may see).
CREATE OR ALTER PROCEDURE sbworker.set_aside
    @queue sysname, @service nvarchar(512), @contract nvarchar(256), @group uniqueidentifier,
    @handle uniqueidentifier, @seq bigint, @type nvarchar(256), @body varbinary(max), @attempts int,
    @reason nvarchar(3000)
WITH EXECUTE AS OWNER
AS
BEGIN
    SET NOCOUNT ON; SET XACT_ABORT ON;
    DECLARE @far nvarchar(256) =
        (SELECT far_service FROM sys.conversation_endpoints WHERE conversation_handle = @handle);
    INSERT sbworker.dead_letter (queue, service_name, service_contract_name, conversation_group_id,
        conversation_handle, message_sequence_number, message_type_name, message_body, attempts, reason,
        far_service)
    VALUES (@queue, @service, @contract, @group, @handle, @seq, @type, @body, @attempts, @reason, @far);
END;
GO

-- The calculation side only: the answered versions and their claim.
IF '$(Side)' NOT IN ('both', 'calc') SET NOEXEC ON;   -- the calculation side only, to SET NOEXEC OFF
GO
IF OBJECT_ID(N'sbworker.answered_version', N'U') IS NULL
    CREATE TABLE sbworker.answered_version (
        dienstverband_id int NOT NULL,
        periode_id       int NOT NULL,
        versie           bigint NOT NULL,
        answered_at      datetime2(3) NOT NULL CONSTRAINT df_answered_at DEFAULT SYSUTCDATETIME(),
        CONSTRAINT pk_answered_version PRIMARY KEY (dienstverband_id, periode_id));
GO

-- Inside the calculation's transaction: claims a roster version of a key; 1 unless it is
-- older than a version answered before, else 0 (superseded). The same version again is
-- claimed: a repair (the sweep's, after its answer was lost or set aside on the data
-- side) or a replay must be computed again. The key stays locked (UPDLOCK, HOLDLOCK) to
-- the end of the transaction.
CREATE OR ALTER PROCEDURE sbworker.claim_version @dv int, @periode int, @versie bigint
AS
BEGIN
    SET NOCOUNT ON; SET XACT_ABORT ON;
    DECLARE @stored bigint;
    SELECT @stored = versie FROM sbworker.answered_version WITH (UPDLOCK, HOLDLOCK)
     WHERE dienstverband_id = @dv AND periode_id = @periode;
    IF @stored IS NULL
        INSERT sbworker.answered_version (dienstverband_id, periode_id, versie) VALUES (@dv, @periode, @versie);
    ELSE IF @stored <= @versie
        UPDATE sbworker.answered_version SET versie = @versie, answered_at = SYSUTCDATETIME()
         WHERE dienstverband_id = @dv AND periode_id = @periode;
    SELECT CAST(CASE WHEN @stored IS NULL OR @stored <= @versie THEN 1 ELSE 0 END AS bit) AS claimed;
END;
GO
SET NOEXEC OFF;
GO


-- Outside any transaction: whether the queue is enabled, about how many messages wait
-- (row counts of its internal table: no locks taken), whether poison-message
-- handling is on for it (the worker refuses to serve such a queue unless told to), and
-- whether activation is on (`sbworker selftest` wants it off on the queues the worker
-- serves).
-- No rows: no such queue.
CREATE OR ALTER PROCEDURE sbworker.queue_state @queue sysname
WITH EXECUTE AS OWNER   -- the catalog views show the owner everything, the caller little
AS
BEGIN
    SET NOCOUNT ON;
    SELECT q.is_receive_enabled,
           CAST(ISNULL((SELECT SUM(p.rows) FROM sys.internal_tables it
                          JOIN sys.partitions p ON p.object_id = it.object_id AND p.index_id IN (0, 1)
                         WHERE it.parent_object_id = q.object_id), 0) AS bigint) AS messages,
           q.is_poison_message_handling_enabled,
           q.is_activation_enabled,
           -- MAX_QUEUE_READERS (ALTER QUEUE ... WITH ACTIVATION (MAX_QUEUE_READERS = n)):
           -- the workers' limit across every process and host; 0 (never set) for none.
           q.max_readers
      FROM sys.service_queues q
     WHERE q.object_id = OBJECT_ID(@queue);
END;
GO

-- A reader slot of @queue among its first @slots, for this session: the first free one,
-- taken as a session-owned application lock (held across transactions, until
-- sbworker.reader_slot_free or the session ends; sp_getapplock), so that the readers of
-- every worker process and host together stay within the queue's MAX_QUEUE_READERS.
-- Named by the queue's object id (the resource is compared as binary: every spelling of
-- the queue's name must give the same slots) and owned by sbworker_role (no other user
-- can take them). One row: the slot, NULL when all are held.
CREATE OR ALTER PROCEDURE sbworker.reader_slot @queue sysname, @slots int
AS
BEGIN
    SET NOCOUNT ON;
    DECLARE @slot int = 0, @taken int, @resource nvarchar(255), @id int = OBJECT_ID(@queue);
    IF @id IS NULL
        THROW 50160, N'sbworker.reader_slot: no such queue', 1;
    WHILE @slot < @slots
    BEGIN
        SET @resource = CONCAT(N'sbworker.reader:', @id, N':', @slot);
        EXEC @taken = sp_getapplock @Resource = @resource, @LockMode = 'Exclusive', @LockOwner = 'Session',
                                    @LockTimeout = 0, @DbPrincipal = N'sbworker_role';
        IF @taken >= 0 BREAK;
        -- -1: held by another session (no wait asked); below: the call failed.
        IF @taken < -1
            THROW 50161, N'sbworker.reader_slot: sp_getapplock failed', 1;
        SET @slot += 1;
    END
    SELECT CASE WHEN @slot < @slots THEN @slot END AS slot;
END;
GO

-- Gives a slot of sbworker.reader_slot back (nothing when this session does not hold it).
CREATE OR ALTER PROCEDURE sbworker.reader_slot_free @queue sysname, @slot int
AS
BEGIN
    SET NOCOUNT ON;
    DECLARE @resource nvarchar(255) = CONCAT(N'sbworker.reader:', OBJECT_ID(@queue), N':', @slot);
    IF APPLOCK_MODE(N'sbworker_role', @resource, N'Session') <> N'NoLock'
        EXEC sp_releaseapplock @Resource = @resource, @LockOwner = 'Session', @DbPrincipal = N'sbworker_role';
END;
GO

-- For `sbworker selftest`: the SET options every sbworker module was created with
-- (xml methods fail in a module created with QUOTED_IDENTIFIER or ANSI_NULLS off, Msg
-- 1934), and, a second result set, the XML schema collection the Vraag's message type
-- validates against (no row: none; the optional script binds one, named with a hash of
-- its XSDs). Runs as the owner: the worker's login sees only what it may use.
CREATE OR ALTER PROCEDURE sbworker.module_options
WITH EXECUTE AS OWNER
AS
BEGIN
    SET NOCOUNT ON;
    SELECT OBJECT_SCHEMA_NAME(m.object_id) + N'.' + OBJECT_NAME(m.object_id) AS module,
           m.uses_quoted_identifier, m.uses_ansi_nulls
      FROM sys.sql_modules m
     WHERE OBJECT_SCHEMA_NAME(m.object_id) IN (N'Rekenserver', N'sbworker', N'Rooster');
    SELECT SCHEMA_NAME(x.schema_id) AS schema_name, x.name AS schema_collection
      FROM sys.service_message_types t
      JOIN sys.xml_schema_collections x ON x.xml_collection_id = t.xml_collection_id
     WHERE t.name = N'/Rekenserver/LoonfactorBerekening/Vraag';
END;
GO
