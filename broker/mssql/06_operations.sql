-- sbworker on SQL Server, script 06: what an operator needs (`sbworker status`,
-- `sbworker dead-letter`, crates/core/src/ops/) and the workers' heartbeats, as 007_operations.sql
-- on PostgreSQL, with the same result shapes. Times travel as ISO 8601 text in UTC.
-- On every side (docs/sqlserver.md, "Two databases, two servers"): each database has its
-- workers, dead letters and status; the status leaves out the roster's parts where there
-- is no roster, and a replay has a version per side.
-- Runs before 07_security.sql, which grants the operator's role (sbworker_operator_role,
-- 00_database.sql) these procedures and nothing else, and the worker's role the
-- heartbeat.

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

-- One row per running worker process, written every worker.heartbeat_ms and deleted
-- when it stops cleanly.
IF OBJECT_ID(N'sbworker.worker_instance', N'U') IS NULL
    CREATE TABLE sbworker.worker_instance (
        instance   uniqueidentifier NOT NULL CONSTRAINT pk_worker_instance PRIMARY KEY,
        host       nvarchar(256) NOT NULL,
        pid        int NOT NULL,
        version    nvarchar(64) NOT NULL,
        started_at datetime2(3) NOT NULL,
        beat_at    datetime2(3) NOT NULL,
        -- Per queue: {"queue": {"readers": n, "busy": n}}.
        queues     nvarchar(max) NOT NULL CONSTRAINT ck_worker_instance_queues CHECK (ISJSON(queues) = 1));
GO
-- How often the instance beats (worker.heartbeat_ms): status judges its silence by it.
IF COL_LENGTH(N'sbworker.worker_instance', N'interval_ms') IS NULL
    ALTER TABLE sbworker.worker_instance ADD interval_ms int NOT NULL CONSTRAINT df_worker_instance_interval DEFAULT 10000;
GO

-- The Vraag contract version the worker reads (NULL: a release before it was recorded):
-- script 04 and `sbworker install` refuse to replace the senders while a live worker
-- reads an older one (docs/deployment.md, "workers first").
IF COL_LENGTH(N'sbworker.worker_instance', N'contract_versie') IS NULL
    ALTER TABLE sbworker.worker_instance ADD contract_versie int NULL;
GO

-- @started_unix: when the instance started, seconds since the Unix epoch;
-- @interval_ms: how often it beats; @contract_versie: the contract version it reads.
CREATE OR ALTER PROCEDURE sbworker.heartbeat
    @instance uniqueidentifier, @host nvarchar(256), @pid int, @version nvarchar(64), @started_unix bigint,
    @queues nvarchar(max), @interval_ms int = 10000, @contract_versie int = NULL
AS
BEGIN
    SET NOCOUNT ON; SET XACT_ABORT ON;
    DECLARE @now datetime2(3) = SYSUTCDATETIME();
    UPDATE sbworker.worker_instance
       SET beat_at = @now, queues = @queues, interval_ms = @interval_ms, contract_versie = @contract_versie
     WHERE instance = @instance;
    IF @@ROWCOUNT = 0
        INSERT sbworker.worker_instance (instance, host, pid, version, started_at, beat_at, queues, interval_ms,
                                         contract_versie)
        VALUES (@instance, @host, @pid, @version,
                DATEADD(SECOND, CAST(@started_unix % 86400 AS int),
                        DATEADD(DAY, CAST(@started_unix / 86400 AS int), CAST('1970-01-01' AS datetime2(3)))),
                @now, @queues, @interval_ms, @contract_versie);
    -- Instances silent for a day are gone for good.
    DELETE sbworker.worker_instance WHERE beat_at < DATEADD(DAY, -1, @now);
END;
GO

CREATE OR ALTER PROCEDURE sbworker.heartbeat_end @instance uniqueidentifier
AS
BEGIN
    SET NOCOUNT ON;
    DELETE sbworker.worker_instance WHERE instance = @instance;
END;
GO

-- The dead letters, newest first: those diverted at or after @since (NULL: any), at
-- most @limit.
CREATE OR ALTER PROCEDURE sbworker.dead_letters @since nvarchar(40) = NULL, @limit int = 100
AS
BEGIN
    SET NOCOUNT ON;
    SET CONCAT_NULL_YIELDS_NULL ON;   -- a NULL time + N'Z' stays NULL
    DECLARE @from datetime2(3) = CONVERT(datetime2(3), @since, 127);
    SELECT TOP (@limit) d.id, d.queue, d.service_name, d.far_service, d.message_type_name, d.message_body,
           d.attempts, d.reason, CONVERT(nvarchar(30), d.dead_lettered_at, 127) + N'Z' AS dead_lettered_at,
           d.replays, CONVERT(nvarchar(30), d.replayed_at, 127) + N'Z' AS replayed_at, d.replayed_by,
           d.replay_handle
      FROM sbworker.dead_letter d
     WHERE @from IS NULL OR d.dead_lettered_at >= @from
     ORDER BY d.id DESC;
END;
GO

-- One dead letter (no row: no such id).
CREATE OR ALTER PROCEDURE sbworker.dead_letter_show @id bigint
AS
BEGIN
    SET NOCOUNT ON;
    SET CONCAT_NULL_YIELDS_NULL ON;   -- a NULL time + N'Z' stays NULL
    SELECT d.id, d.queue, d.service_name, d.far_service, d.message_type_name, d.message_body,
           d.attempts, d.reason, CONVERT(nvarchar(30), d.dead_lettered_at, 127) + N'Z' AS dead_lettered_at,
           d.replays, CONVERT(nvarchar(30), d.replayed_at, 127) + N'Z' AS replayed_at, d.replayed_by,
           d.replay_handle
      FROM sbworker.dead_letter d
     WHERE d.id = @id;
END;
GO

-- The replay has a version for each side: where DataService is (Side roster or both) it
-- begins the dialog again; in the calculation's own database (Side calc) it refuses,
-- saying what repairs the request instead.
IF '$(Side)' NOT IN ('both', 'roster') SET NOEXEC ON;   -- the roster side only, to SET NOEXEC OFF
GO
-- Sends a dead letter's message again, byte for byte, on a new dialog from the service
-- that sent it to the service that received it, and marks the entry replayed (by whom
-- and which login, when, the new dialog); the entry is kept. When the body is a Vraag,
-- its key and version are read from it here (never taken from the caller): the dialog
-- joins the key's conversation group, the calculation log gets its row as for every
-- Vraag sent, and a version the roster never reached is refused. With
-- @unless_replayed = 1 an entry replayed already is left alone (the handle is NULL).
-- As the owner: FROM SERVICE, ON CONTRACT and MESSAGE TYPE take names, not variables,
-- so the dialog is begun in dynamic SQL, where ownership chaining does not reach. The
-- dialog is begun as the worker's user (EXECUTE AS USER ... REVERT), as the roster's are, so
-- that the worker owns it and its collector can end it (END CONVERSATION needs the
-- owner), with the configured LIFETIME.
CREATE OR ALTER PROCEDURE sbworker.replay_dead_letter
    @id bigint, @by nvarchar(256), @unless_replayed bit = 0
WITH EXECUTE AS OWNER
AS
BEGIN
    SET NOCOUNT ON; SET XACT_ABORT ON;
    -- The run-time options xml methods need, whatever the caller's session has.
    SET ANSI_PADDING ON; SET ANSI_WARNINGS ON; SET ARITHABORT ON; SET CONCAT_NULL_YIELDS_NULL ON;
    SET NUMERIC_ROUNDABORT OFF;
    DECLARE @lifetime int = Rekenserver.dialog_levensduur();
    DECLARE @far nvarchar(256), @service nvarchar(256), @contract nvarchar(256), @type nvarchar(256),
            @body varbinary(max), @replays int, @h uniqueidentifier, @sql nvarchar(max), @msg nvarchar(2048),
            @x xml, @vraag_id uniqueidentifier, @dv int, @periode int, @versie bigint, @group uniqueidentifier,
            @roster bigint;
    SELECT @type = message_type_name, @body = message_body FROM sbworker.dead_letter WHERE id = @id;
    IF @@ROWCOUNT = 0
    BEGIN
        SET @msg = CONCAT(N'dead letter ', @id, N' does not exist');
        SET @msg = REPLACE(LEFT(@msg, 1000), N'%', N'%%');   -- THROW reserves % (2,048 characters at most)
        THROW 50404, @msg, 1;
    END;
    -- The key of a Vraag, read before any transaction: a body that is not one is no error.
    IF @type = N'/Rekenserver/LoonfactorBerekening/Vraag'
    BEGIN
        BEGIN TRY
            SET @x = CAST(@body AS xml);
            WITH XMLNAMESPACES (DEFAULT N'http://www.sdbgroep.nl/MPlus/Rekenserver/2008')
            SELECT @vraag_id = @x.value(N'(/LoonfactorBerekeningVraag/@Id)[1]', N'uniqueidentifier'),
                   @versie = @x.value(N'(/LoonfactorBerekeningVraag/@Versie)[1]', N'bigint'),
                   @dv = @x.value(N'(/LoonfactorBerekeningVraag/Dienstverband/@Id)[1]', N'int'),
                   @periode = @x.value(N'(/LoonfactorBerekeningVraag/Periode/@Id)[1]', N'int');
        END TRY
        BEGIN CATCH
            -- A body that cannot be read as a Vraag (not XML: 9400-9499; a value of the
            -- wrong type or too large: 245, 248, 8114, 8169) has no key, and is sent again as it is, without
            -- a calculation log row. Any other error is raised again.
            IF NOT (ERROR_NUMBER() BETWEEN 9400 AND 9499 OR ERROR_NUMBER() IN (245, 248, 8114, 8169))
                THROW;
            SELECT @vraag_id = NULL, @versie = NULL, @dv = NULL, @periode = NULL;
        END CATCH;
    END;
    IF @vraag_id IS NULL OR @versie IS NULL OR @dv IS NULL OR @periode IS NULL
        SELECT @vraag_id = NULL, @versie = NULL, @dv = NULL, @periode = NULL;

    BEGIN TRANSACTION;
    SELECT @far = far_service, @service = service_name, @contract = service_contract_name,
           @type = message_type_name, @body = message_body, @replays = replays
      FROM sbworker.dead_letter WITH (UPDLOCK, HOLDLOCK)
     WHERE id = @id;
    IF @@ROWCOUNT = 0
    BEGIN
        SET @msg = CONCAT(N'dead letter ', @id, N' does not exist');
        SET @msg = REPLACE(LEFT(@msg, 1000), N'%', N'%%');   -- THROW reserves % (2,048 characters at most)
        THROW 50404, @msg, 1;
    END;
    IF @unless_replayed = 1 AND @replays > 0
    BEGIN
        COMMIT;
        SELECT CAST(NULL AS uniqueidentifier) AS conversation_handle;
        RETURN;
    END;
    -- Only what the initiator sends (a request) can begin a dialog again.
    IF NOT EXISTS (SELECT 1 FROM sys.service_contract_message_usages u
                     JOIN sys.service_contracts c ON c.service_contract_id = u.service_contract_id
                     JOIN sys.service_message_types m ON m.message_type_id = u.message_type_id
                    WHERE c.name = @contract AND m.name = @type AND u.is_sent_by_initiator = 1)
    BEGIN
        SET @msg = CONCAT(N'dead letter ', @id, N' is a ', @type, N', which the initiator of contract ', @contract,
                          N' does not send: only requests can be sent again (a stale key is sent again by the sweep)');
        SET @msg = REPLACE(LEFT(@msg, 1000), N'%', N'%%');   -- THROW reserves % (2,048 characters at most)
        THROW 50422, @msg, 1;
    END;
    IF @vraag_id IS NOT NULL
    BEGIN
        SELECT @roster = versie, @group = group_id FROM Rekenserver.sleutel
         WHERE dienstverband_id = @dv AND periode_id = @periode;
        IF @roster IS NULL OR @versie > @roster
        BEGIN
            SET @msg = CONCAT(N'dead letter ', @id, N' asks for version ', @versie, N' of key (', @dv, N', ', @periode,
                              N'), which the roster never reached (it is at ', ISNULL(CAST(@roster AS nvarchar(20)),
                              N'no version'), N'): it is not sent');
            SET @msg = REPLACE(LEFT(@msg, 1000), N'%', N'%%');   -- THROW reserves % (2,048 characters at most)
            THROW 50422, @msg, 1;
        END;
    END;
    IF @far IS NULL
    BEGIN
        SET @msg = CONCAT(N'dead letter ', @id, N' does not say which service sent it (it was diverted after its ',
                          N'conversation was gone), so it cannot be sent again');
        SET @msg = REPLACE(LEFT(@msg, 1000), N'%', N'%%');   -- THROW reserves % (2,048 characters at most)
        THROW 50422, @msg, 1;
    END;
    SET @sql = N'EXECUTE AS USER = @u; BEGIN DIALOG CONVERSATION @h FROM SERVICE ' + QUOTENAME(@far)
             + N' TO SERVICE @to ON CONTRACT ' + QUOTENAME(@contract) + N' WITH '
             + CASE WHEN @group IS NULL THEN N'' ELSE N'RELATED_CONVERSATION_GROUP = @g, ' END
             + N'LIFETIME = @lifetime, ENCRYPTION = OFF; '
             + N'SEND ON CONVERSATION @h MESSAGE TYPE ' + QUOTENAME(@type)
             -- SEND takes no NULL body: a message without one is sent without one.
             + CASE WHEN @body IS NULL THEN N';' ELSE N' (@body);' END
             + N' REVERT;';
    IF @sql IS NULL
    BEGIN
        SET @msg = CONCAT(N'dead letter ', @id, N': a service, contract or message type name is longer than 128 ',
                          N'characters, which QUOTENAME cannot quote');
        SET @msg = REPLACE(LEFT(@msg, 1000), N'%', N'%%');   -- THROW reserves % (2,048 characters at most)
        THROW 50422, @msg, 1;
    END;
    EXEC sys.sp_executesql @sql,
        N'@h uniqueidentifier OUTPUT, @to nvarchar(256), @g uniqueidentifier, @body varbinary(max), @lifetime int, @u sysname',
        @h = @h OUTPUT, @to = @service, @g = @group, @body = @body, @lifetime = @lifetime, @u = N'$(WorkerUser)';
    IF @vraag_id IS NOT NULL
        -- The Vraag as sent, compressed, for the evidence of its result (the SEND above
        -- checked that it is well-formed XML).
        INSERT Rekenserver.berekening_log (dialog_handle, vraag_id, dienstverband_id, periode_id, versie, vraag)
        VALUES (@h, @vraag_id, @dv, @periode, @versie, COMPRESS(CAST(CAST(@body AS xml) AS nvarchar(max))));
    UPDATE sbworker.dead_letter
       SET replays = replays + 1, replayed_at = SYSUTCDATETIME(),
           replayed_by = CONCAT(@by, N' as ', ORIGINAL_LOGIN()), replay_handle = @h
     WHERE id = @id;
    COMMIT;
    SELECT @h AS conversation_handle;
END;
GO
SET NOEXEC OFF;
GO

-- The calculation's own database (Side calc): a diverted Vraag came from the roster's
-- database, whose DataService is not here, so no dialog can be begun from it here. It is
-- repaired there: the calculation answered it with an internal Fout when it set it
-- aside, which the collector records as the environment's fault, and the roster's sweep
-- sends the key's current version again. The entry stays, for `dead-letter show`.
IF '$(Side)' NOT IN ('calc') SET NOEXEC ON;   -- the calculation-only side, to SET NOEXEC OFF
GO
CREATE OR ALTER PROCEDURE sbworker.replay_dead_letter
    @id bigint, @by nvarchar(256), @unless_replayed bit = 0
AS
BEGIN
    SET NOCOUNT ON;
    DECLARE @msg nvarchar(2048);
    IF NOT EXISTS (SELECT 1 FROM sbworker.dead_letter WHERE id = @id)
    BEGIN
        SET @msg = REPLACE(LEFT(CONCAT(N'dead letter ', @id, N' does not exist'), 1000), N'%', N'%%');   -- THROW reserves %
        THROW 50404, @msg, 1;
    END;
    SET @msg = REPLACE(LEFT(CONCAT(N'dead letter ', @id, N' was set aside in the calculation''s database, which ',
        N'has no DataService to begin its dialog from: it is not sent again from here. Its key is repaired in the ',
        N'roster''s database: the collector recorded the Fout of the diversion as the environment''s, and its sweep ',
        N'(sbworker sweep, Rekenserver.sweep) sends the key''s current version again.'), 1000), N'%', N'%%');   -- THROW reserves %
    THROW 50424, @msg, 1;
END;
GO
SET NOEXEC OFF;
GO

-- Deletes up to @batch dead letters diverted before @before, oldest first; one row:
-- how many. The caller repeats until it is 0 (short transactions, no long locks).
CREATE OR ALTER PROCEDURE sbworker.purge_dead_letters @before nvarchar(40), @batch int = 1000
AS
BEGIN
    SET NOCOUNT ON; SET XACT_ABORT ON;
    DECLARE @until datetime2(3) = CONVERT(datetime2(3), @before, 127), @n int;
    WITH old AS (
        SELECT TOP (@batch) id FROM sbworker.dead_letter WHERE dead_lettered_at < @until ORDER BY dead_lettered_at
    )
    DELETE FROM old;
    SET @n = @@ROWCOUNT;
    SELECT @n AS deleted;
END;
GO

-- What a person did from the web page (`sbworker web`), as sbworker.action_log on
-- PostgreSQL: the login that did it (ORIGINAL_LOGIN(): the page runs each action on the
-- login the person signed in with), the filter or id, how many letters it touched.
IF OBJECT_ID(N'sbworker.action_log', N'U') IS NULL
    CREATE TABLE sbworker.action_log (
        id      bigint IDENTITY PRIMARY KEY,
        at      datetime2(3) NOT NULL CONSTRAINT df_action_log_at DEFAULT SYSUTCDATETIME(),
        who     nvarchar(256) NOT NULL CONSTRAINT df_action_log_who DEFAULT ORIGINAL_LOGIN(),
        action  nvarchar(40) NOT NULL,
        detail  nvarchar(2000) NOT NULL,
        letters bigint NOT NULL);
GO

-- The dead letters a filter picks, newest first, at most @limit, none above @upto (the
-- page's cursor). A NULL filter value picks all: @queue the queue, @reason a text the
-- reason holds (CHARINDEX under the column's collation: no LIKE wildcards to escape),
-- @replayed whether the letter was sent again, @id one letter.
CREATE OR ALTER PROCEDURE sbworker.dead_letter_page
    @queue sysname = NULL, @reason nvarchar(3000) = NULL, @replayed bit = NULL, @upto bigint = NULL,
    @limit int = 50, @id bigint = NULL
AS
BEGIN
    SET NOCOUNT ON;
    SET CONCAT_NULL_YIELDS_NULL ON;   -- a NULL time + N'Z' stays NULL
    SELECT TOP (@limit) d.id, d.queue, d.service_name, d.far_service, d.message_type_name, d.message_body,
           d.attempts, d.reason, CONVERT(nvarchar(30), d.dead_lettered_at, 127) + N'Z' AS dead_lettered_at,
           d.replays, CONVERT(nvarchar(30), d.replayed_at, 127) + N'Z' AS replayed_at, d.replayed_by,
           d.replay_handle
      FROM sbworker.dead_letter d
     WHERE (@queue IS NULL OR d.queue = @queue)
       AND (@reason IS NULL OR CHARINDEX(@reason, d.reason) > 0)
       AND (@replayed IS NULL OR (@replayed = 1 AND d.replays > 0) OR (@replayed = 0 AND d.replays = 0))
       AND (@upto IS NULL OR d.id <= @upto)
       AND (@id IS NULL OR d.id = @id)
     ORDER BY d.id DESC;
END;
GO

-- How many dead letters the filter picks, the highest id among them and the sum of their
-- ids (one row).
CREATE OR ALTER PROCEDURE sbworker.dead_letter_count
    @queue sysname = NULL, @reason nvarchar(3000) = NULL, @replayed bit = NULL, @upto bigint = NULL,
    @id bigint = NULL
AS
BEGIN
    SET NOCOUNT ON;
    SELECT COUNT_BIG(*) AS letters, MAX(d.id) AS last_id, ISNULL(SUM(d.id), 0) AS id_sum
      FROM sbworker.dead_letter d
     WHERE (@queue IS NULL OR d.queue = @queue)
       AND (@reason IS NULL OR CHARINDEX(@reason, d.reason) > 0)
       AND (@replayed IS NULL OR (@replayed = 1 AND d.replays > 0) OR (@replayed = 0 AND d.replays = 0))
       AND (@upto IS NULL OR d.id <= @upto)
       AND (@id IS NULL OR d.id = @id);
END;
GO

-- Deletes exactly the set a person confirmed: the letters the filter picks at or below
-- @upto, which must still be @expected letters whose ids add up to @expected_sum
-- (otherwise nothing is deleted: THROW 50120). Written to sbworker.action_log with
-- @detail. One row: how many.
CREATE OR ALTER PROCEDURE sbworker.purge_dead_letters_matching
    @queue sysname = NULL, @reason nvarchar(3000) = NULL, @replayed bit = NULL, @upto bigint,
    @expected bigint, @detail nvarchar(2000), @id bigint = NULL, @expected_sum bigint = NULL
AS
BEGIN
    SET NOCOUNT ON; SET XACT_ABORT ON;
    IF @upto IS NULL OR @expected IS NULL
        THROW 50121, N'a purge by filter needs the highest id and the count that were confirmed', 1;
    DECLARE @ids TABLE (id bigint PRIMARY KEY);
    DECLARE @n bigint, @text nvarchar(400);
    BEGIN TRANSACTION;
    INSERT INTO @ids (id)
    SELECT d.id FROM sbworker.dead_letter d WITH (UPDLOCK, HOLDLOCK)
     WHERE (@queue IS NULL OR d.queue = @queue)
       AND (@reason IS NULL OR CHARINDEX(@reason, d.reason) > 0)
       AND (@replayed IS NULL OR (@replayed = 1 AND d.replays > 0) OR (@replayed = 0 AND d.replays = 0))
       AND d.id <= @upto
       AND (@id IS NULL OR d.id = @id);
    SET @n = @@ROWCOUNT;
    IF @n <> @expected OR (SELECT ISNULL(SUM(id), 0) FROM @ids) <> ISNULL(@expected_sum, -1)
    BEGIN
        ROLLBACK TRANSACTION;
        SET @text = REPLACE(CONCAT(N'the filter picks ', @n, N' dead letters now, not the ', @expected,
                                   N' confirmed (or not the same ones): nothing was deleted; look again and ',
                                   N'confirm anew'),
                            N'%', N'%%');   -- THROW reserves %
        THROW 50120, @text, 1;
    END;
    DELETE d FROM sbworker.dead_letter d JOIN @ids i ON i.id = d.id;
    INSERT INTO sbworker.action_log (action, detail, letters) VALUES (N'purge', @detail, @n);
    COMMIT TRANSACTION;
    SELECT @n AS deleted;
END;
GO

-- Writes an action done through other procedures (a replay from the page) to
-- sbworker.action_log, as the login that calls it.
CREATE OR ALTER PROCEDURE sbworker.note_action @action nvarchar(40), @detail nvarchar(2000), @letters bigint
AS
BEGIN
    SET NOCOUNT ON;
    INSERT INTO sbworker.action_log (action, detail, letters) VALUES (@action, @detail, @letters);
END;
GO

-- The newest actions of the web page, at most @limit.
CREATE OR ALTER PROCEDURE sbworker.actions @limit int = 50
AS
BEGIN
    SET NOCOUNT ON;
    SELECT TOP (@limit) a.id, CONVERT(nvarchar(30), a.at, 127) + N'Z' AS at, a.who, a.action, a.detail, a.letters
      FROM sbworker.action_log a
     ORDER BY a.id DESC;
END;
GO

-- Requests answered per minute over the last @minutes (the web page's plots), as
-- sbworker.rates on PostgreSQL: per minute back from now (0: the current one), how many
-- were answered, how many with a Fout, and the time from the Vraag sent to its answer,
-- median and 95th percentile in whole ms (PERCENTILE_CONT is a window function here, hence
-- the two steps; it leaves out the NULL times of requests the sweep found lost).
-- OPTION (RECOMPILE): @now is known to the plan, so the hour is a seek of
-- ix_berekening_log_uitkomst, not a guess that scans the log. Read through ix_berekening_log_uitkomst (outcome, answered). No rows
-- where there is no calculation log (Side calc); read only where it is (deferred name
-- resolution), as the owner.
CREATE OR ALTER PROCEDURE sbworker.rates @minutes int = 60
WITH EXECUTE AS OWNER
AS
BEGIN
    SET NOCOUNT ON;
    DECLARE @now datetime2(3) = SYSUTCDATETIME();
    DECLARE @r TABLE (minutes_ago int NOT NULL, answered bigint NOT NULL, failed bigint NOT NULL,
                      p50_ms bigint NULL, p95_ms bigint NULL);
    IF OBJECT_ID(N'Rekenserver.berekening_log', N'U') IS NOT NULL
    BEGIN
        WITH answered AS (
            SELECT CAST(DATEDIFF_BIG(MILLISECOND, l.beantwoord_op, @now) / 60000 AS int) AS minutes_ago,
                   CASE WHEN l.uitkomst = 'fout' THEN 1 ELSE 0 END AS failed,
                   CASE WHEN l.foutmelding LIKE N'lost:%' THEN NULL
                        ELSE CAST(DATEDIFF_BIG(MILLISECOND, l.verzonden_op, l.beantwoord_op) AS float) END AS ms
              FROM Rekenserver.berekening_log l
             WHERE l.uitkomst IN ('opgeslagen', 'verouderd', 'vervangen', 'fout')
               AND l.beantwoord_op >= DATEADD(MINUTE, -@minutes, @now)
        ), ranked AS (
            SELECT a.minutes_ago, a.failed,
                   PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY a.ms) OVER (PARTITION BY a.minutes_ago) AS p50_ms,
                   PERCENTILE_CONT(0.95) WITHIN GROUP (ORDER BY a.ms) OVER (PARTITION BY a.minutes_ago) AS p95_ms
              FROM answered a
        )
        INSERT INTO @r (minutes_ago, answered, failed, p50_ms, p95_ms)
        SELECT r.minutes_ago, COUNT_BIG(*), SUM(CAST(r.failed AS bigint)), CAST(ROUND(MIN(r.p50_ms), 0) AS bigint),
               CAST(ROUND(MIN(r.p95_ms), 0) AS bigint)
          FROM ranked r
         GROUP BY r.minutes_ago
        OPTION (RECOMPILE);
    END;
    SELECT minutes_ago, answered, failed, p50_ms, p95_ms FROM @r ORDER BY minutes_ago;
END;
GO

-- For `sbworker selftest --side` (a split deployment, docs/sqlserver.md "Two databases,
-- two servers"): the routes this database has to other services (sys.routes, without
-- the AutoCreatedLocal route of every database), then, a second result set, the messages
-- waiting in sys.transmission_queue per far service: how many, the oldest's age in
-- seconds (enqueue_time is UTC) and why it waits (its transmission_status; blank: not
-- tried yet). As the owner: the catalog views show the worker's login little.
CREATE OR ALTER PROCEDURE sbworker.transport_state
WITH EXECUTE AS OWNER
AS
BEGIN
    SET NOCOUNT ON;
    SELECT r.name, r.remote_service_name, CAST(r.broker_instance AS nvarchar(128)) AS broker_instance,
           CAST(r.address AS nvarchar(256)) AS address, CAST(r.mirror_address AS nvarchar(256)) AS mirror_address
      FROM sys.routes r
     WHERE NOT (r.remote_service_name IS NULL AND r.broker_instance IS NULL AND r.address = N'LOCAL')
     ORDER BY r.remote_service_name, r.name;
    SELECT t.to_service_name AS far_service, COUNT_BIG(*) AS messages,
           CAST(DATEDIFF_BIG(MILLISECOND, MIN(t.enqueue_time), SYSUTCDATETIME()) / 1000.0 AS float) AS oldest_seconds,
           (SELECT TOP (1) o.transmission_status FROM sys.transmission_queue o
             WHERE o.to_service_name = t.to_service_name
                OR (o.to_service_name IS NULL AND t.to_service_name IS NULL)
             ORDER BY o.enqueue_time) AS status
      FROM sys.transmission_queue t
     GROUP BY t.to_service_name
     ORDER BY far_service;
END;
GO

-- Everything `sbworker status` shows, as one JSON document in one row (column report);
-- its shape is documented in docs/operations.md and is the PostgreSQL broker's.
-- @recent_minutes: the window of "retried recently"; @stale_minutes: a key is stale
-- when its roster changed more than this long ago and its stored result is older. As
-- the owner: the catalog views show a caller only what it may see, and the queues are
-- read directly. SQL Server keeps no creation time of a conversation endpoint: the
-- oldest open conversation is the oldest request still unanswered in the calculation
-- log.
CREATE OR ALTER PROCEDURE sbworker.status_report @recent_minutes int = 10, @stale_minutes int = 60
WITH EXECUTE AS OWNER
AS
BEGIN
    SET NOCOUNT ON;
    -- The run-time options xml methods need (Setting Options (xml Data Type)), whatever a
    -- monitoring client's session has (QUOTED_IDENTIFIER and ANSI_NULLS were fixed when
    -- this procedure was created); restored on return.
    SET ANSI_PADDING ON; SET ANSI_WARNINGS ON; SET ARITHABORT ON; SET CONCAT_NULL_YIELDS_NULL ON;
    SET NUMERIC_ROUNDABORT OFF;
    DECLARE @now datetime2(3) = SYSUTCDATETIME();
    -- Per queue: the groups waiting and the age of the oldest message, read from the
    -- queue itself (one statement per queue: a queue's name is not a variable).
    DECLARE @q TABLE (object_id int PRIMARY KEY, groups bigint NULL, oldest_ms bigint NULL);
    DECLARE @oid int, @name nvarchar(600), @sql nvarchar(max), @groups bigint, @oldest_ms bigint;
    DECLARE queues CURSOR LOCAL FAST_FORWARD FOR
        SELECT object_id, QUOTENAME(SCHEMA_NAME(schema_id)) + N'.' + QUOTENAME(name)
          FROM sys.service_queues WHERE is_ms_shipped = 0;
    OPEN queues;
    FETCH NEXT FROM queues INTO @oid, @name;
    WHILE @@FETCH_STATUS = 0
    BEGIN
        SET @sql = N'SELECT @g = COUNT_BIG(DISTINCT conversation_group_id), '
                 + N'@o = DATEDIFF_BIG(MILLISECOND, MIN(message_enqueue_time), SYSDATETIMEOFFSET()) FROM '
                 + @name + N' WITH (NOLOCK)';
        EXEC sys.sp_executesql @sql, N'@g bigint OUTPUT, @o bigint OUTPUT', @g = @groups OUTPUT, @o = @oldest_ms OUTPUT;
        INSERT @q (object_id, groups, oldest_ms) VALUES (@oid, @groups, @oldest_ms);
        FETCH NEXT FROM queues INTO @oid, @name;
    END;
    CLOSE queues;
    DEALLOCATE queues;

    -- {"CO": n, ...}: FOR XML PATH concatenation (STRING_AGG needs SQL Server 2017; the
    -- scripts run on 2016 SP1). The states are two letters, nothing to escape.
    DECLARE @by_state nvarchar(max) = N'{' + ISNULL(STUFF((
        SELECT N',"' + RTRIM(s.state) + N'":' + CAST(s.n AS nvarchar(20))
          FROM (SELECT state, COUNT_BIG(*) AS n FROM sys.conversation_endpoints GROUP BY state) s
           FOR XML PATH(''), TYPE).value('.', 'nvarchar(max)'), 1, 1, N''), N'') + N'}';

    -- The roster's parts: the calculation log, the keys, the results and the sweep's runs
    -- are in the roster's database (Side roster or both); in the calculation's database
    -- (Side calc) they are NULL. Read only where they are: a statement naming a table
    -- that does not exist fails when it runs (deferred name resolution), one never run
    -- does not.
    DECLARE @oldest_open nvarchar(max), @oldest_request_ms bigint, @reused_idle bigint, @stale nvarchar(max),
            @sweeps nvarchar(max), @last_export nvarchar(max);
    IF OBJECT_ID(N'Rekenserver.berekening_log', N'U') IS NOT NULL AND OBJECT_ID(N'Rekenserver.sleutel', N'U') IS NOT NULL
       AND OBJECT_ID(N'Rekenserver.resultaat', N'U') IS NOT NULL AND OBJECT_ID(N'Rekenserver.run_log', N'U') IS NOT NULL
    BEGIN
        SET @oldest_open = (
            SELECT TOP (1) LOWER(CAST(l.dialog_handle AS nvarchar(36))) AS handle,
                   (SELECT sv.name FROM sys.services sv WHERE sv.service_id = ce.service_id) AS service,
                   CAST(ce.state AS nvarchar(2)) AS state,
                   DATEDIFF_BIG(MILLISECOND, l.verzonden_op, @now) / 1000.0 AS age_seconds
              FROM Rekenserver.berekening_log l
              JOIN sys.conversation_endpoints ce ON ce.conversation_handle = l.dialog_handle
             WHERE l.uitkomst IS NULL
             ORDER BY l.verzonden_op
               FOR JSON PATH, WITHOUT_ARRAY_WRAPPER, INCLUDE_NULL_VALUES);
        -- The oldest request without an outcome: `status` flags one older than the
        -- stale threshold.
        SET @oldest_request_ms = (SELECT DATEDIFF_BIG(MILLISECOND, MIN(l.verzonden_op), @now)
                                    FROM Rekenserver.berekening_log l WHERE l.uitkomst IS NULL);
        -- Conversation reuse: the keys' dialogs with no request open, waiting for their
        -- idle timers (the collector ends them). Not work in flight.
        SET @reused_idle = (
            SELECT COUNT_BIG(*) FROM sys.conversation_endpoints e
              JOIN sys.service_contracts c ON c.service_contract_id = e.service_contract_id
             WHERE c.name = N'/Rekenserver/LoonfactorBerekening/SleutelContract' AND e.is_initiator = 1
               AND e.state IN ('SO', 'CO')
               AND NOT EXISTS (SELECT 1 FROM Rekenserver.berekening_log l
                                WHERE l.dialog_handle = e.conversation_handle AND l.uitkomst IS NULL));
        SET @stale = (
            SELECT COUNT_BIG(*) AS [count],
                   DATEDIFF_BIG(MILLISECOND, MIN(s.gewijzigd_op), @now) / 1000.0 AS oldest_seconds
              FROM Rekenserver.sleutel s
              LEFT JOIN Rekenserver.resultaat r
                ON r.dienstverband_id = s.dienstverband_id AND r.periode_id = s.periode_id
             WHERE s.versie > ISNULL(r.versie, 0)
               AND s.gewijzigd_op < DATEADD(MINUTE, -@stale_minutes, @now)
               FOR JSON PATH, WITHOUT_ARRAY_WRAPPER, INCLUDE_NULL_VALUES);
        SET @sweeps = ISNULL((
            SELECT CONVERT(nvarchar(30), r.start, 127) + N'Z' AS started_at,
                   CONVERT(nvarchar(30), r.eind, 127) + N'Z' AS ended_at,
                   CAST(r.ms AS bigint) AS ms, CAST(r.kandidaten AS bigint) AS candidates,
                   CAST(r.verzonden AS bigint) AS sent, CAST(r.verwijderd AS bigint) AS deleted,
                   NULLIF(r.fout, N'') AS error
              FROM (SELECT TOP (5) * FROM Rekenserver.run_log WHERE run_id IS NULL AND stap = 'run'
                     ORDER BY id DESC) r
             ORDER BY r.id DESC
               FOR JSON PATH, INCLUDE_NULL_VALUES), N'[]');
        SET @last_export = (
            SELECT TOP (1) LOWER(CAST(r.export_batch AS nvarchar(36))) AS batch,
                   CONVERT(nvarchar(30), MAX(r.geclaimd_op), 127) + N'Z' AS claimed_at,
                   COUNT_BIG(*) AS results,
                   COUNT_BIG(CASE WHEN r.export_status = 2 THEN 1 END) AS confirmed
              FROM Rekenserver.resultaat r
             WHERE r.export_batch IS NOT NULL
             GROUP BY r.export_batch
             ORDER BY MAX(r.geclaimd_op) DESC
               FOR JSON PATH, WITHOUT_ARRAY_WRAPPER, INCLUDE_NULL_VALUES);
    END;

    SELECT (
        SELECT N'sqlserver' AS backend,
               CONVERT(nvarchar(30), @now, 127) + N'Z' AS [at],
               JSON_QUERY(ISNULL((
                   SELECT SCHEMA_NAME(sq.schema_id) + N'.' + sq.name AS queue,
                          sq.is_receive_enabled AS enabled,
                          sq.is_poison_message_handling_enabled AS poison_handling,
                          CAST(sq.max_readers AS bigint) AS max_readers,
                          CAST(ISNULL((SELECT SUM(p.rows) FROM sys.internal_tables it
                                         JOIN sys.partitions p ON p.object_id = it.object_id AND p.index_id IN (0, 1)
                                        WHERE it.parent_object_id = sq.object_id), 0) AS bigint) AS messages,
                          x.groups AS groups_waiting,
                          x.oldest_ms / 1000.0 AS oldest_message_seconds,
                          (SELECT COUNT_BIG(*) FROM sbworker.message_attempt a
                            WHERE a.queue IN (SCHEMA_NAME(sq.schema_id) + N'.' + sq.name, sq.name)
                              AND (a.attempts > 1 OR a.transient_failures > 0)
                              AND a.last_attempt_at > DATEADD(MINUTE, -@recent_minutes, @now)) AS retried_recently,
                          (SELECT COUNT_BIG(*) FROM sbworker.dead_letter d
                            WHERE d.queue IN (SCHEMA_NAME(sq.schema_id) + N'.' + sq.name, sq.name)) AS dead_letters,
                          (SELECT COUNT_BIG(*) FROM sbworker.dead_letter d
                            WHERE d.queue IN (SCHEMA_NAME(sq.schema_id) + N'.' + sq.name, sq.name) AND d.replays = 0)
                              AS dead_letters_not_replayed
                     FROM sys.service_queues sq JOIN @q x ON x.object_id = sq.object_id
                    ORDER BY queue
                      FOR JSON PATH, INCLUDE_NULL_VALUES), N'[]')) AS queues,
               JSON_QUERY(ISNULL((
                   SELECT LOWER(CAST(w.instance AS nvarchar(36))) AS instance, w.host, CAST(w.pid AS bigint) AS pid,
                          w.version, CONVERT(nvarchar(30), w.started_at, 127) + N'Z' AS started_at,
                          DATEDIFF_BIG(MILLISECOND, w.beat_at, @now) / 1000.0 AS beat_seconds_ago,
                          CAST(w.interval_ms AS bigint) AS interval_ms,
                          JSON_QUERY(w.queues) AS queues
                     FROM sbworker.worker_instance w
                    ORDER BY w.started_at
                      FOR JSON PATH, INCLUDE_NULL_VALUES), N'[]')) AS workers,
               JSON_QUERY(@by_state) AS [conversations.by_state],
               -- Messages waiting to leave for another instance (a route or endpoint down,
               -- a certificate refused): per far service, how many, the oldest's age
               -- (enqueue_time is UTC) and why it waits (its transmission_status; blank:
               -- not tried yet). The first thing to break in a routed deployment.
               JSON_QUERY(ISNULL((
                   SELECT t.to_service_name AS far_service, COUNT_BIG(*) AS messages,
                          DATEDIFF_BIG(MILLISECOND, MIN(t.enqueue_time), @now) / 1000.0 AS oldest_seconds,
                          (SELECT TOP (1) o.transmission_status FROM sys.transmission_queue o
                            WHERE o.to_service_name = t.to_service_name
                               OR (o.to_service_name IS NULL AND t.to_service_name IS NULL)
                            ORDER BY o.enqueue_time) AS status
                     FROM sys.transmission_queue t
                    GROUP BY t.to_service_name
                    ORDER BY far_service
                      FOR JSON PATH, INCLUDE_NULL_VALUES), N'[]')) AS transmission,
               JSON_QUERY(@oldest_open) AS [conversations.oldest_open],
               @oldest_request_ms / 1000.0 AS [conversations.oldest_request_seconds],
               @reused_idle AS [conversations.reused_idle],
               JSON_QUERY(@stale) AS stale_keys,
               JSON_QUERY(@sweeps) AS sweeps,
               JSON_QUERY(@last_export) AS last_export
           FOR JSON PATH, WITHOUT_ARRAY_WRAPPER, INCLUDE_NULL_VALUES) AS report;
END;
GO
