-- sbworker on SQL Server, script 05: the hand-off to payroll and the housekeeping,
-- the same behaviour as `sbworker export` and `sbworker sweep` on PostgreSQL.
-- Claims use UPDATE ... OUTPUT ... INTO a table variable: a plain OUTPUT fails on a table
-- with triggers (error 334), and the result set is built from the claimed keys only.

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

-- The roster side only (Side roster or both): export, sweep and the selftest's roster
-- work read the roster's results and keys.
IF '$(Side)' NOT IN ('both', 'roster') SET NOEXEC ON;   -- the roster side only, to SET NOEXEC OFF at the end
GO

IF OBJECT_ID(N'Rekenserver.run_log', N'U') IS NULL
    CREATE TABLE Rekenserver.run_log (
        id bigint IDENTITY PRIMARY KEY, run_id bigint NULL, stap varchar(20) NOT NULL,
        start datetime2(3) NOT NULL CONSTRAINT df_run_log_start DEFAULT SYSUTCDATETIME(), eind datetime2(3) NULL,
        ms int NULL, kandidaten int NULL, verzonden int NULL, verwijderd int NULL, fout nvarchar(2000) NULL,
        INDEX ix_run_log_start (start));
GO

-- @mode 'once' (marked exported when claimed: at-most-once) or 'lease' (claimed, and
-- claims older than @lease_minutes taken again; confirm with Rekenserver.export_ack).
-- Only results with factor rows are claimed. The claim and the read of the factors are
-- one transaction: the claimed rows stay locked until the factors are read, so a newer
-- Antwoord stored meanwhile cannot be exported under the old version. READ COMMITTED
-- whatever the caller's level (READPAST is a READ COMMITTED hint: Table Hints, Msg 650;
-- with READ_COMMITTED_SNAPSHOT on it needs READCOMMITTEDLOCK too), reset on return.
CREATE OR ALTER PROCEDURE Rekenserver.export_claim @periode int, @mode varchar(10), @lease_minutes int = 15,
    @batch uniqueidentifier
AS
BEGIN
    SET NOCOUNT ON; SET XACT_ABORT ON;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    IF @mode NOT IN ('once', 'lease') THROW 50101, 'mode must be once or lease', 1;
    BEGIN TRANSACTION;
    DECLARE @claimed TABLE (dienstverband_id int NOT NULL, periode_id int NOT NULL, versie bigint NOT NULL,
                            vorige_export_versie bigint NULL, waarschuwingen nvarchar(max) NULL,
                            PRIMARY KEY (dienstverband_id, periode_id));
    UPDATE r
       SET export_status = CASE @mode WHEN 'once' THEN 2 ELSE 1 END, export_batch = @batch,
           geclaimd_op = SYSUTCDATETIME(), geexporteerd_op = CASE @mode WHEN 'once' THEN SYSUTCDATETIME() END,
           geexporteerde_versie = r.versie
    OUTPUT inserted.dienstverband_id, inserted.periode_id, inserted.versie, inserted.vorige_export_versie,
           inserted.waarschuwingen INTO @claimed
      FROM Rekenserver.resultaat r WITH (READPAST, UPDLOCK, ROWLOCK, READCOMMITTEDLOCK)
     WHERE r.periode_id = @periode
       AND (r.export_status = 0
            OR (@mode = 'lease' AND r.export_status = 1 AND r.geclaimd_op < DATEADD(MINUTE, -@lease_minutes, SYSUTCDATETIME())))
       AND EXISTS (SELECT 1 FROM Rekenserver.resultaat_factor f
                    WHERE f.dienstverband_id = r.dienstverband_id AND f.periode_id = r.periode_id);
    -- When the version went out, in its evidence (the first time).
    IF @mode = 'once'
        UPDATE h SET geexporteerd_op = SYSUTCDATETIME()
          FROM Rekenserver.resultaat_historie h
          JOIN @claimed c ON c.dienstverband_id = h.dienstverband_id AND c.periode_id = h.periode_id
                         AND c.versie = h.versie
         WHERE h.geexporteerd_op IS NULL;
    -- waarde as text, exactly as stored (decimal(18, 4)), as the PostgreSQL export gives it.
    SELECT @batch AS batch, CONCAT(c.dienstverband_id, '-', c.periode_id, '-', c.versie) AS sleutel,
           c.dienstverband_id, c.periode_id, c.versie, f.kaart_soort, f.loonfactor_code,
           CONVERT(varchar(40), f.waarde) AS waarde, c.vorige_export_versie AS vervangt_versie,
           c.waarschuwingen
      FROM @claimed c JOIN Rekenserver.resultaat_factor f
        ON f.dienstverband_id = c.dienstverband_id AND f.periode_id = c.periode_id
     ORDER BY c.dienstverband_id, f.loonfactor_code;
    COMMIT TRANSACTION;
END;
GO

-- Lost dialogs: requests without an outcome whose dialog no longer exists at the data
-- side (its endpoint ended WITH CLEANUP, removed by SET NEW_BROKER or a restore, or
-- closed without an answer). No answer can come for them any more, so they are recorded
-- as failed by the environment, and the sweep sends their keys again. The sweep runs
-- this first; run it by hand after SET NEW_BROKER or a restore. Returns how many it
-- marked. As the owner: sys.conversation_endpoints shows a user only the endpoints of
-- what it owns or has a permission on (metadata visibility), and the worker's user owns
-- these. (A request in flight has its endpoint until the collector records its outcome
-- and ends it, in one transaction, so it is never marked.)
CREATE OR ALTER PROCEDURE Rekenserver.markeer_verloren
WITH EXECUTE AS OWNER
AS
BEGIN
    SET NOCOUNT ON; SET XACT_ABORT ON;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;   -- the caller's, again on return
    UPDATE l
       SET uitkomst = 'fout', herstelbaar = 1, beantwoord_op = SYSUTCDATETIME(), vraag = NULL,
           foutmelding = N'lost: the dialog no longer exists (ended with cleanup, or the broker was reset) without an answer'
      FROM Rekenserver.berekening_log l
     WHERE l.uitkomst IS NULL
       AND NOT EXISTS (SELECT 1 FROM sys.conversation_endpoints e
                        WHERE e.conversation_handle = l.dialog_handle AND e.state <> 'CD');
    DECLARE @verloren int = @@ROWCOUNT;
    -- A dialog whose far side is gone while a request on it waits (an operator ended the
    -- calculation side WITH CLEANUP, say), where the far side is in this database: the
    -- initiator's conversation has no target endpoint here, no message of it is in
    -- transmission (sys.transmission_queue: a target not yet reached) and none waits for
    -- the initiator that would say what happened (an EndDialog or Error: the collector's
    -- to record). Lost now, not when the LIFETIME runs out; the initiator endpoint is left
    -- to its LIFETIME (no WITH CLEANUP here), whose Error then finds the request recorded.
    UPDATE l
       SET uitkomst = 'fout', herstelbaar = 1, beantwoord_op = SYSUTCDATETIME(), vraag = NULL,
           foutmelding = N'lost: the far side of the dialog no longer exists (ended with cleanup) without an answer'
      FROM Rekenserver.berekening_log l
      JOIN sys.conversation_endpoints i ON i.conversation_handle = l.dialog_handle AND i.is_initiator = 1
     WHERE l.uitkomst IS NULL
       AND i.state IN ('SO', 'CO')
       AND EXISTS (SELECT 1 FROM sys.services s WHERE s.name = i.far_service)
       AND NOT EXISTS (SELECT 1 FROM sys.conversation_endpoints t
                        WHERE t.conversation_id = i.conversation_id AND t.is_initiator = 0)
       AND NOT EXISTS (SELECT 1 FROM sys.transmission_queue q WHERE q.conversation_handle = i.conversation_handle)
       -- (NOLOCK, as "Querying Queues" advises: a SELECT on a queue may block its readers.)
       AND NOT EXISTS (SELECT 1 FROM dbo.loonfactorberekening_data m WITH (NOLOCK)
                        WHERE m.conversation_handle = i.conversation_handle);
    SET @verloren += @@ROWCOUNT;
    SELECT @verloren AS verloren;
END;
GO

-- `sbworker recompute --mssql`: one recompute at a time, under an application lock held
-- by the session and taken without waiting; a run-log row (stap 'herberekening').
-- Returns the run-log row's id, or NULL when another recompute holds the lock.
CREATE OR ALTER PROCEDURE Rekenserver.herberekening_begin
AS
BEGIN
    SET NOCOUNT ON;
    DECLARE @lock int, @run bigint = NULL;
    EXEC @lock = sp_getapplock @Resource = N'Rekenserver.herberekening', @LockMode = 'Exclusive',
                               @LockOwner = 'Session', @LockTimeout = 0;
    IF @lock >= 0
    BEGIN
        INSERT Rekenserver.run_log (stap) VALUES ('herberekening');
        SET @run = SCOPE_IDENTITY();
    END
    SELECT @run AS run_id;
END;
GO

-- Completes a recompute's run-log row (@run NULL: a dry run, nothing to log) and
-- releases its lock.
-- (sp_getapplock: a lock taken n times is released n times. One herberekening_begin per
-- connection, as sbworker recompute does, so one release here.)
CREATE OR ALTER PROCEDURE Rekenserver.herberekening_einde @run bigint, @kandidaten int, @verzonden int,
    @fout nvarchar(2000) = NULL
AS
BEGIN
    SET NOCOUNT ON;
    UPDATE Rekenserver.run_log SET eind = SYSUTCDATETIME(), ms = DATEDIFF(MILLISECOND, start, SYSUTCDATETIME()),
           kandidaten = @kandidaten, verzonden = @verzonden, fout = @fout
     WHERE id = @run;
    IF APPLOCK_MODE('public', N'Rekenserver.herberekening', 'Session') <> 'NoLock'
        EXEC sp_releaseapplock @Resource = N'Rekenserver.herberekening', @LockOwner = 'Session';
END;
GO

CREATE OR ALTER PROCEDURE Rekenserver.export_ack @batch uniqueidentifier
AS
BEGIN
    SET NOCOUNT ON; SET XACT_ABORT ON;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;   -- under SNAPSHOT its updates could fail (3960)
    DECLARE @done TABLE (dienstverband_id int NOT NULL, periode_id int NOT NULL, versie bigint NOT NULL);
    BEGIN TRANSACTION;
    -- The version claimed: a version with the same figures stored since has moved `versie`.
    UPDATE Rekenserver.resultaat SET export_status = 2, geexporteerd_op = SYSUTCDATETIME()
    OUTPUT inserted.dienstverband_id, inserted.periode_id, ISNULL(inserted.geexporteerde_versie, inserted.versie) INTO @done
     WHERE export_batch = @batch AND export_status = 1;
    -- When each version went out, in its evidence (the first time).
    UPDATE h SET geexporteerd_op = SYSUTCDATETIME()
      FROM Rekenserver.resultaat_historie h
      JOIN @done d ON d.dienstverband_id = h.dienstverband_id AND d.periode_id = h.periode_id AND d.versie = h.versie
     WHERE h.geexporteerd_op IS NULL;
    COMMIT TRANSACTION;
    SELECT COUNT(*) AS confirmed FROM @done;
END;
GO

-- The sweep (the original system's pattern): an application lock taken without waiting, a fuse, sends in
-- batches, one run-log row per run and per step, retention in batches.
-- First the requests whose dialog is gone are marked lost (Rekenserver.markeer_verloren):
-- "in flight" is a log row without an outcome, and every such row either has its dialog
-- or gets an outcome here, so no key stays in flight for good. Keys whose Vraag cannot be
-- built are recorded (Rekenserver.onverzendbaar), not counted as sent, and left out until
-- their version rises. A batch holds each key's conversation group until it commits
-- (BEGIN DIALOG locks it), so batches are small. Refused inside a caller's transaction:
-- its CATCH would roll the caller's work back. Ends with one row saying what it did
-- (skipped, lost, candidates, sent, repairs, fuse reached, run-log rows and dead letters
-- deleted), for `sbworker sweep --mssql`.
CREATE OR ALTER PROCEDURE Rekenserver.sweep @fuse int = 500, @batch int = 100, @retention_days int = 60,
    @delete_batch int = 5000, @evidence_retention_months int = 84
AS
BEGIN
    SET NOCOUNT ON;
    -- A caller with IMPLICIT_TRANSACTIONS on (a driver with autocommit off) would have
    -- its first statement open a transaction that the batches' COMMITs only nest in.
    SET IMPLICIT_TRANSACTIONS OFF;
    -- RAISERROR, not THROW: THROW honours XACT_ABORT (SET XACT_ABORT) and would roll the
    -- caller's transaction back, which this check exists to spare.
    IF @@TRANCOUNT > 0
    BEGIN
        RAISERROR (N'Rekenserver.sweep commits its own batches: run it outside a transaction', 16, 1);
        RETURN 1;
    END;
    SET XACT_ABORT ON; SET DEADLOCK_PRIORITY LOW;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;   -- under SNAPSHOT its updates could fail (3960)
    SET CONCAT_NULL_YIELDS_NULL ON;   -- the run log's text joins its parts with @fout + N'; '
    -- A batch size of 0 would loop for ever; a retention of 0 days would delete this run's
    -- own log rows.
    IF @fuse IS NULL OR @fuse < 1 THROW 50110, N'@fuse must be 1 or more (keys sent at most per run)', 1;
    IF @batch IS NULL OR @batch < 1 THROW 50111, N'@batch must be 1 or more (keys sent per transaction)', 1;
    IF @retention_days IS NULL OR @retention_days < 1
        THROW 50112, N'@retention_days must be 1 or more (days the run log, dead letters and answered requests are kept)', 1;
    IF @delete_batch IS NULL OR @delete_batch < 1
        THROW 50113, N'@delete_batch must be 1 or more (rows deleted per statement)', 1;
    IF @evidence_retention_months IS NULL OR @evidence_retention_months < 1 OR @evidence_retention_months > 1200
        THROW 50115, N'@evidence_retention_months must be 1 to 1200 (months the evidence of a replaced result is kept)', 1;
    DECLARE @run bigint, @step bigint, @lock int, @t0 datetime2(3), @n int, @sent int = 0, @deleted int = 0,
            @fout nvarchar(2000) = NULL, @dv int, @p int, @done int = 0, @verzonden bit, @verloren int = 0,
            @kandidaten int = 0, @herstel int = 0, @fuse_bereikt bit = 0, @del_log int = 0, @del_dead int = 0,
            @batch_sent int, @del_bewijs int = 0, @del_verzoek int = 0;
    DECLARE @gemarkeerd TABLE (verloren int);
    INSERT Rekenserver.run_log (stap) VALUES ('run');
    SET @run = SCOPE_IDENTITY();
    EXEC @lock = sp_getapplock @Resource = N'Rekenserver.sweep', @LockMode = 'Exclusive', @LockOwner = 'Session',
                               @LockTimeout = 0;
    IF @lock < 0
    BEGIN
        UPDATE Rekenserver.run_log SET eind = SYSUTCDATETIME(), ms = 0,
               fout = CONCAT(N'skipped: a previous run still holds the lock (code ', @lock, N')')
         WHERE id = @run;
        SELECT CAST(1 AS bit) AS skipped, 0 AS lost, 0 AS candidates, 0 AS sent, 0 AS repaired,
               CAST(0 AS bit) AS fuse_reached, 0 AS deleted_log_rows, 0 AS deleted_dead_letters, 0 AS deleted_evidence,
               0 AS deleted_requests;
        RETURN;
    END
    BEGIN TRY
        INSERT Rekenserver.run_log (run_id, stap) VALUES (@run, 'sweep');
        SET @step = SCOPE_IDENTITY();
        INSERT @gemarkeerd EXEC Rekenserver.markeer_verloren;
        SELECT @verloren = verloren FROM @gemarkeerd;
        DECLARE @kand TABLE (nr int IDENTITY PRIMARY KEY, dv int NOT NULL, p int NOT NULL, herstel bit NOT NULL);
        INSERT @kand (dv, p, herstel)
        -- (bigint: @fuse + 1 overflows int at 2147483647, Msg 8115.)
        SELECT TOP (CAST(@fuse AS bigint) + 1) s.dienstverband_id, s.periode_id,
               CASE WHEN EXISTS (SELECT 1 FROM Rekenserver.berekening_log l
                                  WHERE l.dienstverband_id = s.dienstverband_id AND l.periode_id = s.periode_id
                                    AND l.versie = s.versie AND l.uitkomst = 'fout') THEN 1 ELSE 0 END
          FROM Rekenserver.sleutel s
          LEFT JOIN Rekenserver.resultaat r ON r.dienstverband_id = s.dienstverband_id AND r.periode_id = s.periode_id
         WHERE s.versie > ISNULL(r.versie, 0)
           -- In flight, or the latest version ended in a Fout about the request itself:
           -- not sent. One that failed by the environment (herstelbaar: an internal Fout
           -- after a diversion, a Fout from a worker older than the Vraag, an error end, a
           -- lost dialog) is sent again, at most three times per version.
           AND NOT EXISTS (SELECT 1 FROM Rekenserver.berekening_log l
                            WHERE l.dienstverband_id = s.dienstverband_id AND l.periode_id = s.periode_id
                              AND (l.uitkomst IS NULL
                                   OR (l.versie = s.versie AND l.uitkomst = 'fout' AND ISNULL(l.herstelbaar, 0) = 0)))
           -- Its Vraag could not be built at this version: it waits for a roster change.
           AND NOT EXISTS (SELECT 1 FROM Rekenserver.onverzendbaar o
                            WHERE o.dienstverband_id = s.dienstverband_id AND o.periode_id = s.periode_id
                              AND o.versie = s.versie)
           AND (SELECT COUNT(*) FROM Rekenserver.berekening_log l
                 WHERE l.dienstverband_id = s.dienstverband_id AND l.periode_id = s.periode_id
                   AND l.versie = s.versie AND l.uitkomst = 'fout') < 3
         ORDER BY s.gewijzigd_op, s.dienstverband_id, s.periode_id;
        SET @n = @@ROWCOUNT;
        IF @n > @fuse
        BEGIN
            DELETE @kand WHERE nr > @fuse;
            SET @fout = CONCAT(N'warning: fuse of ', @fuse, N' keys reached; the rest waits for the next run');
            SELECT @n = @fuse, @fuse_bereikt = 1;
        END
        SELECT @kandidaten = @n, @herstel = (SELECT COUNT(*) FROM @kand WHERE herstel = 1);
        WHILE @done < @n
        BEGIN
            BEGIN TRANSACTION;
            SET @batch_sent = 0;
            DECLARE keys CURSOR LOCAL FAST_FORWARD FOR
                SELECT dv, p FROM @kand WHERE nr > @done AND nr <= @done + @batch ORDER BY nr;
            OPEN keys;
            FETCH NEXT FROM keys INTO @dv, @p;
            WHILE @@FETCH_STATUS = 0
            BEGIN
                EXEC Rekenserver.stuur_vraag @dv = @dv, @periode = @p, @verzonden = @verzonden OUTPUT;
                SET @batch_sent += CAST(@verzonden AS int);
                FETCH NEXT FROM keys INTO @dv, @p;
            END
            CLOSE keys; DEALLOCATE keys;
            COMMIT TRANSACTION;
            SET @sent += @batch_sent;   -- counted once committed
            SET @done += @batch;
        END
        IF @n > @sent
            SET @fout = CONCAT(@fout + N'; ', @n - @sent,
                               N' keys not sent: no longer a key, or their Vraag cannot be built (Rekenserver.onverzendbaar says why)');
        IF @verloren > 0
            SET @fout = CONCAT(@fout + N'; ', N'lost dialogs: ', @verloren, N' requests without their dialog marked lost');
        UPDATE Rekenserver.run_log SET eind = SYSUTCDATETIME(), ms = DATEDIFF(MILLISECOND, start, SYSUTCDATETIME()),
               kandidaten = @n, verzonden = @sent, fout = @fout
         WHERE id = @step;

        INSERT Rekenserver.run_log (run_id, stap) VALUES (@run, 'retentie');
        SET @step = SCOPE_IDENTITY();
        WHILE 1 = 1
        BEGIN
            DELETE TOP (@delete_batch) FROM Rekenserver.run_log WHERE start < DATEADD(DAY, -@retention_days, SYSUTCDATETIME());
            SET @n = @@ROWCOUNT; SET @deleted += @n; SET @del_log += @n;
            IF @n < @delete_batch BREAK;
        END
        WHILE 1 = 1
        BEGIN
            DELETE TOP (@delete_batch) FROM sbworker.dead_letter WHERE dead_lettered_at < DATEADD(DAY, -@retention_days, SYSUTCDATETIME());
            SET @n = @@ROWCOUNT; SET @deleted += @n; SET @del_dead += @n;
            IF @n < @delete_batch BREAK;
        END
        -- The evidence of stored versions replaced more than @evidence_retention_months ago
        -- (a version's retention runs from the day a newer one replaced it, vervangen_op);
        -- a key's latest version (not replaced) stays and is never read: the seek on
        -- ix_resultaat_historie_vervangen starts past its NULL. Oldest first (TOP in a
        -- DELETE picks no order: the ids are chosen in a subquery that has one), in batches.
        WHILE 1 = 1
        BEGIN
            DELETE Rekenserver.resultaat_historie
             WHERE id IN (
                SELECT TOP (@delete_batch) h.id
                  FROM Rekenserver.resultaat_historie h
                 WHERE h.vervangen_op < DATEADD(MONTH, -@evidence_retention_months, SYSUTCDATETIME())
                 ORDER BY h.vervangen_op);
            SET @n = @@ROWCOUNT; SET @deleted += @n; SET @del_bewijs += @n;
            IF @n < @delete_batch BREAK;
        END
        -- The log rows of requests answered more than @retention_days ago: every outcome
        -- but a Fout of the key's current version, which the sweep reads (a Fout about the
        -- request keeps the key waiting for a roster change; repairs count at most three).
        -- Requests in flight stay, and so do those of a key's open reused dialog
        -- (dialoog_stil and noteer_fout find the dialog's key through them). Found
        -- through ix_berekening_log_uitkomst (by outcome, then time): of the rows kept only
        -- each key's current Fouts are read again. At most 4,000 rows a statement: the
        -- roster's triggers write this table, and 5,000 locks escalate to a table lock
        -- (Lock Escalation).
        DECLARE @log_batch int = CASE WHEN @delete_batch > 4000 THEN 4000 ELSE @delete_batch END;
        WHILE 1 = 1
        BEGIN
            DELETE TOP (@log_batch) l
              FROM Rekenserver.berekening_log l
             WHERE l.uitkomst IN ('opgeslagen', 'verouderd', 'vervangen', 'fout')
               AND l.beantwoord_op < DATEADD(DAY, -@retention_days, SYSUTCDATETIME())
               AND NOT EXISTS (SELECT 1 FROM Rekenserver.sleutel s
                                WHERE s.dienstverband_id = l.dienstverband_id AND s.periode_id = l.periode_id
                                  AND (s.dialog_handle = l.dialog_handle
                                       OR (l.uitkomst = 'fout' AND s.versie = l.versie)));
            SET @n = @@ROWCOUNT; SET @deleted += @n; SET @del_verzoek += @n;
            IF @n < @log_batch BREAK;
        END
        UPDATE Rekenserver.run_log SET eind = SYSUTCDATETIME(), ms = DATEDIFF(MILLISECOND, start, SYSUTCDATETIME()),
               verwijderd = @deleted
         WHERE id = @step;
    END TRY
    BEGIN CATCH
        -- Raised again at the end, once the lock is released and the run logged.
        IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION;
        SET @fout = CONVERT(nvarchar(2000), CONCAT(N'error ', ERROR_NUMBER(), N': ', ERROR_MESSAGE()));
    END CATCH
    IF APPLOCK_MODE('public', N'Rekenserver.sweep', 'Session') <> 'NoLock'
        EXEC sp_releaseapplock @Resource = N'Rekenserver.sweep', @LockOwner = 'Session';
    UPDATE Rekenserver.run_log SET eind = SYSUTCDATETIME(), ms = DATEDIFF(MILLISECOND, start, SYSUTCDATETIME()),
           kandidaten = (SELECT kandidaten FROM Rekenserver.run_log WHERE run_id = @run AND stap = 'sweep'),
           verzonden = @sent, verwijderd = @deleted, fout = @fout
     WHERE id = @run;
    -- A failed run is logged above and raised again, so that a SQL Agent job step (or
    -- any caller) sees it fail.
    IF @fout LIKE N'error %'
    BEGIN
        -- THROW reserves %, so it is doubled (within the message's 2,048 characters).
        DECLARE @raise nvarchar(2048) = REPLACE(LEFT(@fout, 1000), N'%', N'%%');
        THROW 50114, @raise, 1;
    END
    SELECT CAST(0 AS bit) AS skipped, @verloren AS lost, @kandidaten AS candidates, @sent AS sent, @herstel AS repaired,
           @fuse_bereikt AS fuse_reached, @del_log AS deleted_log_rows, @del_dead AS deleted_dead_letters,
           @del_bewijs AS deleted_evidence, @del_verzoek AS deleted_requests;
END;
GO

-- For `sbworker selftest --mssql`, run as the worker's login: one round trip on a
-- scratch key, dienstverband (and CAO) -1000001 in a period of its own, December 2099,
-- a month no real roster holds (so no real export sees it). Runs as the owner: the
-- worker's login may not touch the roster. @stap:
--   'begin'     removes what an earlier run left, then writes the scratch roster; the
--               roster trigger sends one Vraag (the first statements with sending off);
--   'dialogen'  the scratch key's dialogs, newest version first: the initiator's handle,
--               the target's (the same conversation's other endpoint), the version;
--   'resultaat' the stored result's version and number of wage factors (no row: none);
--   'export'    how many results export_claim would claim for the scratch period now
--               (read only: the worker's login may not claim, the payroll role does);
--   'einde'     removes every row of the scratch key and ends its open conversations;
-- and for `selftest --deep` (the T-SQL's other paths on the same key):
--   'wijzig'    a planner's edit: the scratch block half an hour longer (a Vraag);
--   'verlies'   a DBA's END CONVERSATION ... WITH CLEANUP of the newest request's target
--               (the initiator is not told): its target's handle, NULL while there is
--               none yet (the message not yet delivered: call again);
--   'werkers'   how many workers beat within three of their intervals (deep wants none).
-- Its open dialogs are ended normally at the initiator: the worker ends the target side
-- when the EndDialog arrives. WITH CLEANUP only for an initiator whose target is gone
-- (after 'verlies'), a conversation that cannot complete, as END CONVERSATION's page
-- reserves it: its EndDialog would wait in sys.transmission_queue for its LIFETIME.
CREATE OR ALTER PROCEDURE Rekenserver.selftest @stap varchar(10)
WITH EXECUTE AS OWNER
AS
BEGIN
    SET NOCOUNT ON; SET XACT_ABORT ON;
    DECLARE @dv int = -1000001, @periode int = -1000001, @handle uniqueidentifier;
    IF @stap NOT IN ('begin', 'dialogen', 'resultaat', 'export', 'einde', 'wijzig', 'verlies', 'werkers')
        THROW 50120, N'@stap must be begin, dialogen, resultaat, export, einde, wijzig, verlies or werkers', 1;
    IF @stap IN ('begin', 'einde')
    BEGIN
        BEGIN TRANSACTION;
        EXEC sp_set_session_context N'vragen_uit', 1;
        DECLARE @verweesd bit;
        DECLARE open_dialogs CURSOR LOCAL STATIC READ_ONLY FOR
            SELECT DISTINCT i.conversation_handle,   -- (a dialog may carry several requests)
                   -- (On the roster side of a split deployment the target is on the
                   -- calculation's server: its far broker instance is another database's,
                   -- and such a dialog ends normally, so that the far side hears of it.
                   -- Before the far side answered, the instance is not known yet: then the
                   -- far service being in this database decides.)
                   CASE WHEN (TRY_CONVERT(uniqueidentifier, i.far_broker_instance)
                                = (SELECT d.service_broker_guid FROM sys.databases d WHERE d.database_id = DB_ID())
                              OR (i.far_broker_instance IS NULL
                                  AND EXISTS (SELECT 1 FROM sys.services s WHERE s.name = i.far_service)))
                         AND NOT EXISTS (SELECT 1 FROM sys.conversation_endpoints t
                                          WHERE t.conversation_id = i.conversation_id AND t.is_initiator = 0)
                        THEN 1 ELSE 0 END
              FROM Rekenserver.berekening_log l
              JOIN sys.conversation_endpoints i ON i.conversation_handle = l.dialog_handle
             WHERE l.dienstverband_id = @dv AND i.state NOT IN ('DO', 'CD');
        OPEN open_dialogs;
        FETCH NEXT FROM open_dialogs INTO @handle, @verweesd;
        WHILE @@FETCH_STATUS = 0
        BEGIN
            IF @verweesd = 1
                END CONVERSATION @handle WITH CLEANUP;
            ELSE
                END CONVERSATION @handle;
            FETCH NEXT FROM open_dialogs INTO @handle, @verweesd;
        END
        CLOSE open_dialogs; DEALLOCATE open_dialogs;
        DELETE Rooster.dienst WHERE dienstverband_id = @dv;
        DELETE Rooster.dienstverband WHERE id = @dv;
        DELETE Rooster.periode WHERE id = @periode;
        DELETE Rooster.cao WHERE id = @dv;
        DELETE d FROM Rooster.dienst_type d
         WHERE d.code = 'STEST' AND NOT EXISTS (SELECT 1 FROM Rooster.tijdblok t WHERE t.dienst_type = d.code);
        DELETE Rekenserver.resultaat_factor WHERE dienstverband_id = @dv;
        DELETE Rekenserver.resultaat WHERE dienstverband_id = @dv;
        DELETE Rekenserver.resultaat_historie WHERE dienstverband_id = @dv;
        DELETE Rekenserver.berekening_log WHERE dienstverband_id = @dv;
        DELETE Rekenserver.sleutel WHERE dienstverband_id = @dv;
        -- (The calculation's claims are in this database only when it holds both sides.)
        IF OBJECT_ID(N'sbworker.answered_version', N'U') IS NOT NULL
            DELETE sbworker.answered_version WHERE dienstverband_id = @dv;
        IF @stap = 'begin'
        BEGIN
            INSERT Rooster.cao (id, code, is_vier_weken, naam, werkweek_uren)
            VALUES (@dv, 'ZKH', 0, N'sbworker selftest', 36);
            INSERT Rooster.periode (id, is_vier_weken, begin_datum, eind_datum)
            VALUES (@periode, 0, '20991201', '20991231');
            INSERT Rooster.dienstverband (id, cao_id, dagen_per_week, datum_in_dienst, parttime_uren, salaris, soort,
                                          functiegroep)
            VALUES (@dv, @dv, 5, '20990101', 36, 3000, 'FT', 45);
            IF NOT EXISTS (SELECT 1 FROM Rooster.dienst_type WHERE code = 'STEST')
                INSERT Rooster.dienst_type (code, omschrijving, telt_mee_in_gewerkte_uren)
                VALUES ('STEST', N'sbworker selftest', 1);
            INSERT Rooster.dienst (dienstverband_id, datum) VALUES (@dv, '20991207');
            -- The block's statement sends the key's one Vraag.
            EXEC sp_set_session_context N'vragen_uit', 0;
            INSERT Rooster.tijdblok (dienst_id, begin_tijd, eind_tijd, dienst_type)
            SELECT id, '07:00', '15:30', 'STEST' FROM Rooster.dienst WHERE dienstverband_id = @dv;
        END
        EXEC sp_set_session_context N'vragen_uit', 0;
        COMMIT TRANSACTION;
    END
    ELSE IF @stap = 'dialogen'
        SELECT l.dialog_handle, t.conversation_handle AS target_handle, l.versie
          FROM Rekenserver.berekening_log l
          LEFT JOIN sys.conversation_endpoints i ON i.conversation_handle = l.dialog_handle
          LEFT JOIN sys.conversation_endpoints t ON t.conversation_id = i.conversation_id AND t.is_initiator = 0
         WHERE l.dienstverband_id = @dv AND l.periode_id = @periode
         ORDER BY l.versie DESC, l.verzonden_op DESC;
    ELSE IF @stap = 'wijzig'
        -- The deep selftest's planner: the scratch block half an hour longer (the
        -- statement sends the key's next Vraag).
        UPDATE t SET eind_tijd = DATEADD(MINUTE, 30, t.eind_tijd)
          FROM Rooster.tijdblok t JOIN Rooster.dienst d ON d.id = t.dienst_id
         WHERE d.dienstverband_id = @dv;
    ELSE IF @stap = 'verlies'
    BEGIN
        -- The deep selftest's DBA: the newest request's dialog ended on the calculation
        -- side WITH CLEANUP (the initiator is not told; the owner, dbo, may), so the
        -- next sweep must find the request lost.
        SELECT TOP (1) @handle = t.conversation_handle
          FROM Rekenserver.berekening_log l
          JOIN sys.conversation_endpoints i ON i.conversation_handle = l.dialog_handle
          JOIN sys.conversation_endpoints t ON t.conversation_id = i.conversation_id AND t.is_initiator = 0
         WHERE l.dienstverband_id = @dv AND l.periode_id = @periode
         ORDER BY l.versie DESC, l.verzonden_op DESC;
        IF @handle IS NOT NULL
            END CONVERSATION @handle WITH CLEANUP;
        SELECT @handle AS target_handle;
    END
    ELSE IF @stap = 'werkers'
    BEGIN
        -- Alive as `sbworker status` counts it: a beat within three of its intervals, at
        -- least 3 s. Read through dynamic SQL: script 06 makes the table and its
        -- interval_ms.
        DECLARE @levend int = 0;
        IF OBJECT_ID(N'sbworker.worker_instance', N'U') IS NOT NULL
            EXEC sys.sp_executesql
                N'SELECT @levend = COUNT(*) FROM sbworker.worker_instance
                   WHERE beat_at > DATEADD(MILLISECOND, -(CASE WHEN interval_ms < 1000 THEN 3000 ELSE 3 * interval_ms END),
                                           SYSUTCDATETIME())',
                N'@levend int OUTPUT', @levend = @levend OUTPUT;
        SELECT @levend AS levend;
    END
    ELSE IF @stap = 'resultaat'
        SELECT r.versie, (SELECT COUNT(*) FROM Rekenserver.resultaat_factor f
                           WHERE f.dienstverband_id = r.dienstverband_id AND f.periode_id = r.periode_id) AS factoren
          FROM Rekenserver.resultaat r
         WHERE r.dienstverband_id = @dv AND r.periode_id = @periode;
    ELSE
        -- What export_claim's WHERE takes, read without claiming.
        SELECT COUNT(*) AS exporteerbaar
          FROM Rekenserver.resultaat r
         WHERE r.periode_id = @periode AND r.export_status = 0
           AND EXISTS (SELECT 1 FROM Rekenserver.resultaat_factor f
                        WHERE f.dienstverband_id = r.dienstverband_id AND f.periode_id = r.periode_id);
END;
GO

-- A recompute's progress on its run-log row (`sbworker recompute`, after every batch):
-- the keys recomputed and the Vraags sent so far, for the web page's runs.
CREATE OR ALTER PROCEDURE Rekenserver.herberekening_voortgang @run bigint, @kandidaten int, @verzonden int
AS
BEGIN
    SET NOCOUNT ON;
    UPDATE Rekenserver.run_log SET kandidaten = @kandidaten, verzonden = @verzonden WHERE id = @run;
END;
GO

-- The newest runs of the run log (a sweep's run row, a recompute's row; their steps left
-- out), at most @limit, as rekenserver.runs on PostgreSQL: a recompute still running has
-- no end yet, and its counts are its progress.
CREATE OR ALTER PROCEDURE Rekenserver.runs @limit int = 20
AS
BEGIN
    SET NOCOUNT ON;
    SET CONCAT_NULL_YIELDS_NULL ON;   -- a NULL time + N'Z' stays NULL
    SELECT TOP (@limit) r.id, CAST(r.stap AS nvarchar(40)) AS stap,
           CONVERT(nvarchar(33), r.start, 126) + N'Z' AS start, CONVERT(nvarchar(33), r.eind, 126) + N'Z' AS eind,
           r.ms, r.kandidaten, r.verzonden, r.verwijderd, r.fout
      FROM Rekenserver.run_log r
     WHERE r.run_id IS NULL
     ORDER BY r.id DESC;
END;
GO

-- The newest export batches the stored results were last claimed in, at most @limit:
-- the period, when claimed, how many results, how many confirmed.
CREATE OR ALTER PROCEDURE Rekenserver.export_batches @limit int = 20
AS
BEGIN
    SET NOCOUNT ON;
    SET CONCAT_NULL_YIELDS_NULL ON;   -- a NULL time + N'Z' stays NULL
    SELECT TOP (@limit) r.export_batch, MIN(r.periode_id) AS periode_id,
           CONVERT(nvarchar(33), MAX(r.geclaimd_op), 126) + N'Z' AS claimed_at, COUNT_BIG(*) AS results,
           COUNT_BIG(CASE WHEN r.export_status = 2 THEN 1 END) AS confirmed
      FROM Rekenserver.resultaat r
     WHERE r.export_batch IS NOT NULL
     GROUP BY r.export_batch
     ORDER BY MAX(r.geclaimd_op) DESC;
END;
GO

SET NOEXEC OFF;
GO
