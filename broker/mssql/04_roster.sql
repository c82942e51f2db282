-- sbworker on SQL Server, script 04: the roster schema and its triggers (the sending
-- side of the pipeline, as in the original system).
--
-- Differs from PostgreSQL's 004_roster.sql in one respect: SQL Server has no trigger
-- that runs at COMMIT, so a trigger sends one Vraag per key per *statement* (each with
-- the next version), not per transaction; and per *action* for MERGE, which fires the
-- AFTER trigger once for each of its insert, update and delete actions (MERGE, "Trigger
-- implementation"), so one MERGE can send up to three per key. A statement touching
-- 10,000 rows of one key still sends one Vraag; a transaction of several statements on
-- one key sends several, the last carrying the final roster and the highest version,
-- and latest-wins keeps the right result. For bulk imports set EXEC
-- sp_set_session_context N'vragen_uit', 1 (versions still rise, nothing is sent) and run
-- the sweep. A load that fires no trigger (bcp or BULK INSERT without FIRE_TRIGGERS,
-- SqlBulkCopy without SqlBulkCopyOptions.FireTriggers, TRUNCATE TABLE) raises no version:
-- load with FIRE_TRIGGERS (docs/sqlserver.md).

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

-- The roster side only (Side roster or both): the roster, its triggers and the sender.
-- In a split deployment the workers-first check below sees the heartbeats of this
-- database's workers only (the collector's); the calculation's workers beat in theirs
-- (`sbworker status` there says which release each runs).
IF '$(Side)' NOT IN ('both', 'roster') SET NOEXEC ON;   -- the roster side only, to SET NOEXEC OFF at the end
GO

-- Workers first (docs/deployment.md): this script replaces the senders, whose Vraag is of
-- contract version 2 (`ContractVersie`); a live calculation worker that reads an older
-- one would refuse every Vraag. So it stops (50150) while a worker that beat within three
-- of its intervals reads an older version, or records none (a release before the
-- column), unless the session says to go on anyway:
--   EXEC sp_set_session_context N'sbworker.oudere_workers_toegestaan', 1;
-- (`sbworker install --mssql --allow-older-workers` does that.) The heartbeat table and
-- its columns may not exist yet (script 06 makes them): read through dynamic SQL.
IF OBJECT_ID(N'sbworker.worker_instance', N'U') IS NOT NULL
   AND ISNULL(CAST(SESSION_CONTEXT(N'sbworker.oudere_workers_toegestaan') AS int), 0) = 0
BEGIN
    DECLARE @oud int, @wie nvarchar(2000),
            -- (One of them named: STRING_AGG needs SQL Server 2017.)
            @sql nvarchar(max) = N'SELECT @oud = COUNT(*),
                   @wie = MAX(CONCAT(host, N'' pid '', pid, N'' (sbworker '', version, N'')''))
              FROM sbworker.worker_instance
             WHERE beat_at > DATEADD(MILLISECOND, -' +
            -- Alive: a beat within three of its intervals, at least 3 s (as sbworker status).
            CASE WHEN COL_LENGTH(N'sbworker.worker_instance', N'interval_ms') IS NULL THEN N'30000'
                 ELSE N'(CASE WHEN interval_ms < 1000 THEN 3000 ELSE 3 * interval_ms END)' END
            + N', SYSUTCDATETIME())' +
            -- The version a worker reads: the column, or (a worker of this release against
            -- the install before, which has no column yet) its version text's
            -- "contract N"; none: 1. Only workers that serve the calculation queue (or
            -- have reported no queue yet) read a Vraag.
            N' AND ISNULL(' +
            CASE WHEN COL_LENGTH(N'sbworker.worker_instance', N'contract_versie') IS NULL THEN N'NULL'
                 ELSE N'contract_versie' END +
            N', ISNULL(TRY_CAST(CASE WHEN CHARINDEX(N''contract '', version) > 0
                                     THEN SUBSTRING(version, CHARINDEX(N''contract '', version) + 9, 9) END AS int), 1)) < 2
               AND (queues = N''{}'' OR queues LIKE N''%loonfactorberekening_reken%'')';
    EXEC sys.sp_executesql @sql, N'@oud int OUTPUT, @wie nvarchar(2000) OUTPUT', @oud = @oud OUTPUT, @wie = @wie OUTPUT;
    IF @oud > 0
    BEGIN
        DECLARE @melding nvarchar(2048) = REPLACE(CONCAT(@oud, N' live calculation worker(s) read an older Vraag ',
            N'contract than this script sends (among them ', @wie, N'): upgrade the workers first (docs/deployment.md), or ',
            N'go on anyway with EXEC sp_set_session_context N''sbworker.oudere_workers_toegestaan'', 1'), N'%', N'%%');
        THROW 50150, @melding, 1;
    END
END
GO

IF OBJECT_ID(N'Rooster.cao', N'U') IS NULL
    CREATE TABLE Rooster.cao (
        id int PRIMARY KEY, code varchar(10) NOT NULL, is_vier_weken bit NOT NULL,
        naam nvarchar(100) NOT NULL, werkweek_uren decimal(8, 4) NOT NULL);
GO
IF OBJECT_ID(N'Rooster.periode', N'U') IS NULL
    CREATE TABLE Rooster.periode (
        id int PRIMARY KEY, is_vier_weken bit NOT NULL, begin_datum date NOT NULL, eind_datum date NOT NULL,
        CONSTRAINT ck_periode CHECK (eind_datum >= begin_datum));
GO
IF OBJECT_ID(N'Rooster.dienstverband', N'U') IS NULL
    CREATE TABLE Rooster.dienstverband (
        id int PRIMARY KEY, cao_id int NOT NULL REFERENCES Rooster.cao, dagen_per_week decimal(8, 4) NOT NULL,
        datum_in_dienst date NOT NULL, datum_uit_dienst date NULL, parttime_uren decimal(8, 4) NULL,
        salaris decimal(14, 4) NULL, garantie_toeslag decimal(14, 4) NULL, garantie_trede_bedrag decimal(14, 4) NULL,
        loon_toeslag decimal(14, 4) NULL, soort varchar(10) NOT NULL, functiegroep int NOT NULL);
GO
IF OBJECT_ID(N'Rooster.dienst_type', N'U') IS NULL
    CREATE TABLE Rooster.dienst_type (
        code varchar(10) PRIMARY KEY, omschrijving nvarchar(100) NOT NULL, telt_mee_in_gewerkte_uren bit NOT NULL);
GO
IF OBJECT_ID(N'Rooster.dienst', N'U') IS NULL
    CREATE TABLE Rooster.dienst (
        id bigint IDENTITY PRIMARY KEY, dienstverband_id int NOT NULL REFERENCES Rooster.dienstverband,
        datum date NOT NULL, INDEX ix_dienst_dv_datum (dienstverband_id, datum));
GO
IF OBJECT_ID(N'Rooster.tijdblok', N'U') IS NULL
    CREATE TABLE Rooster.tijdblok (
        id bigint IDENTITY PRIMARY KEY, dienst_id bigint NOT NULL REFERENCES Rooster.dienst ON DELETE CASCADE,
        begin_tijd time(0) NOT NULL, eind_tijd time(0) NOT NULL,
        dienst_type varchar(10) NOT NULL REFERENCES Rooster.dienst_type, is_ziek bit NOT NULL DEFAULT 0,
        INDEX ix_tijdblok_dienst (dienst_id));
GO
-- Leave taken on the block's hours (the Vraag's Verlof): statutory vacation, the rest of
-- the vacation, other leave; NULL for work or sickness (a leave block is not sick). Added
-- to an existing install too (COL_LENGTH is NULL for a column that does not exist). The
-- check reads is_ziek as well, so it is a table constraint (a column constraint may
-- reference its own column only), added in a batch of its own after the column's (a
-- batch is compiled whole, before the column exists).
IF COL_LENGTH(N'Rooster.tijdblok', N'verlof') IS NULL
    ALTER TABLE Rooster.tijdblok ADD verlof varchar(16) NULL;
GO
-- Compared in a binary collation and with its length, so that only the exact values the
-- Vraag's XSD names pass ('wettelijk' or 'Wettelijk ' would pass a case-insensitive
-- comparison, which also ignores trailing spaces).
IF OBJECT_ID(N'Rooster.ck_tijdblok_verlof', N'C') IS NULL
    ALTER TABLE Rooster.tijdblok ADD CONSTRAINT ck_tijdblok_verlof
        CHECK (verlof IS NULL
               OR (verlof COLLATE Latin1_General_BIN2 IN ('Wettelijk', 'Bovenwettelijk', 'Overig')
                   AND DATALENGTH(verlof) = LEN(verlof) AND is_ziek = 0));
GO

-- Per key: the roster version (only grows) and the initiator's conversation group of
-- its dialogs (RELATED_CONVERSATION_GROUP, listing 8).
IF OBJECT_ID(N'Rekenserver.sleutel', N'U') IS NULL
    CREATE TABLE Rekenserver.sleutel (
        dienstverband_id int NOT NULL, periode_id int NOT NULL, versie bigint NOT NULL,
        group_id uniqueidentifier NOT NULL, gewijzigd_op datetime2(3) NOT NULL DEFAULT SYSUTCDATETIME(),
        CONSTRAINT pk_sleutel PRIMARY KEY (dienstverband_id, periode_id));
GO
-- With conversation reuse: the key's open dialog (its initiator's handle), which carries
-- its next versions until the collector ends it idle, and when its LIFETIME ends (UTC,
-- written when it was begun). Added to an existing install too.
IF COL_LENGTH(N'Rekenserver.sleutel', N'dialog_handle') IS NULL
    ALTER TABLE Rekenserver.sleutel ADD dialog_handle uniqueidentifier NULL;
GO
IF COL_LENGTH(N'Rekenserver.sleutel', N'dialog_verloopt') IS NULL
    ALTER TABLE Rekenserver.sleutel ADD dialog_verloopt datetime2(3) NULL;
GO

-- The Vraag of one key (listing 10: WITH XMLNAMESPACES ... FOR XML PATH).
CREATE OR ALTER FUNCTION Rekenserver.vraag (@dv int, @periode int, @versie bigint, @id uniqueidentifier)
RETURNS xml
AS
BEGIN
    DECLARE @vraag xml;
    WITH XMLNAMESPACES (DEFAULT 'http://www.sdbgroep.nl/MPlus/Rekenserver/2008')
    SELECT @vraag = (
        -- The time in Amsterdam, as the PostgreSQL builder writes it, whatever the server's
        -- own time zone (AT TIME ZONE, SQL Server 2016).
        SELECT @id AS '@Id',
               -- Style 121 always writes the milliseconds (126 drops them when they are 0).
               STUFF(CONVERT(char(23), CONVERT(datetime2(3),
                   SYSUTCDATETIME() AT TIME ZONE 'UTC' AT TIME ZONE 'W. Europe Standard Time'), 121), 11, 1, 'T')
                   AS '@Timestamp',
               @versie AS '@Versie',
               -- The contract version (crates/core/src/contract/mod.rs, CONTRACT_VERSIE): a
               -- worker that knows an older one refuses it as the environment's fault.
               2 AS '@ContractVersie',
            (SELECT dv.id AS '@Id',
                (SELECT c.id AS '@Id', c.code AS 'Code', CAST(c.is_vier_weken AS int) AS 'IsVierWeken', c.naam AS 'Naam',
                        c.werkweek_uren AS 'WerkweekUren'
                   FOR XML PATH ('Cao'), TYPE),
                dv.dagen_per_week AS 'DagenPerWeek',
                CONVERT(char(10), dv.datum_in_dienst, 126) AS 'DatumInDienst',
                CONVERT(char(10), dv.datum_uit_dienst, 126) AS 'DatumUitDienst',
                ISNULL(NULLIF(dv.parttime_uren, 0), c.werkweek_uren) AS 'ParttimeUren',
                CASE WHEN dv.salaris IS NOT NULL THEN dv.garantie_toeslag END AS 'Salaris/@GarantieToeslag',
                CASE WHEN dv.salaris IS NOT NULL THEN dv.garantie_trede_bedrag END AS 'Salaris/@GarantieTredeBedrag',
                CASE WHEN dv.salaris IS NOT NULL THEN dv.loon_toeslag END AS 'Salaris/@LoonToeslag',
                dv.salaris AS 'Salaris/NominaalSalaris',
                dv.soort AS 'Soort', dv.functiegroep AS 'Functiegroep'
               FOR XML PATH ('Dienstverband'), TYPE),
            (SELECT p.id AS '@Id', CONVERT(char(10), p.begin_datum, 126) AS 'Begin',
                    CONVERT(char(10), p.eind_datum, 126) AS 'Einde'
               FOR XML PATH ('Periode'), TYPE),
            (SELECT (SELECT CONVERT(char(10), d.datum, 126) AS '@Datum',
                        (SELECT CONVERT(char(5), t.begin_tijd, 108) AS '@Begin', CONVERT(char(5), t.eind_tijd, 108) AS '@Einde',
                                CAST(t.is_ziek AS int) AS '@IsZiek',
                                t.verlof AS '@Verlof',
                                dt.code AS 'DienstType/@Code',
                                CAST(dt.telt_mee_in_gewerkte_uren AS int) AS 'DienstType/@TeltMeeInGewerkteUren'
                           FROM Rooster.tijdblok t JOIN Rooster.dienst_type dt ON dt.code = t.dienst_type
                          WHERE t.dienst_id = d.id
                          ORDER BY t.begin_tijd, t.id
                            FOR XML PATH ('Tijdblok'), TYPE)
                       FROM Rooster.dienst d
                      WHERE d.dienstverband_id = dv.id AND d.datum BETWEEN p.begin_datum AND p.eind_datum
                        AND EXISTS (SELECT 1 FROM Rooster.tijdblok t WHERE t.dienst_id = d.id)
                      ORDER BY d.datum, d.id
                        FOR XML PATH ('Dienst'), TYPE)
               FOR XML PATH ('Diensten'), TYPE),
            -- The stored results of the periods that begin in the 12 months before this
            -- one (the CAO's averages look back at most that far); no element when there
            -- are none (FOR XML with ROOT over no rows gives NULL).
            (SELECT hp.id AS '@Id', CONVERT(char(10), hp.begin_datum, 126) AS '@Begin',
                    CONVERT(char(10), hp.eind_datum, 126) AS '@Einde',
                    (SELECT f.loonfactor_code AS '@Code', f.waarde AS '@Waarde'
                       FROM Rekenserver.resultaat_factor f
                      WHERE f.dienstverband_id = dv.id AND f.periode_id = hp.id
                      ORDER BY f.loonfactor_code
                        FOR XML PATH ('Factor'), TYPE)
               FROM Rooster.periode hp
              WHERE hp.is_vier_weken = c.is_vier_weken
                AND hp.begin_datum >= DATEADD(month, -12, p.begin_datum) AND hp.eind_datum < p.begin_datum
                AND EXISTS (SELECT 1 FROM Rekenserver.resultaat r
                             WHERE r.dienstverband_id = dv.id AND r.periode_id = hp.id)
              ORDER BY hp.begin_datum, hp.id
                FOR XML PATH ('Periode'), ROOT ('Historie'), TYPE)
          FROM Rooster.dienstverband dv
          JOIN Rooster.cao c ON c.id = dv.cao_id
          JOIN Rooster.periode p ON p.id = @periode
         WHERE dv.id = @dv
           FOR XML PATH ('LoonfactorBerekeningVraag'), TYPE);
    RETURN @vraag;
END;
GO

-- Keys whose Vraag could not be built at their current version (the dienstverband, its
-- CAO or the period is gone): recorded with the reason, left out of the sweep until the
-- key's version rises again, and never counted as sent.
IF OBJECT_ID(N'Rekenserver.onverzendbaar', N'U') IS NULL
    CREATE TABLE Rekenserver.onverzendbaar (
        dienstverband_id int NOT NULL,
        periode_id       int NOT NULL,
        versie           bigint NOT NULL,
        reden            nvarchar(200) NOT NULL,
        sinds            datetime2(3) NOT NULL CONSTRAINT df_onverzendbaar_sinds DEFAULT SYSUTCDATETIME(),
        CONSTRAINT pk_onverzendbaar PRIMARY KEY (dienstverband_id, periode_id));
GO

-- Sends the Vraag of one key at its current version, in the key's group, with the
-- configured LIFETIME (Rekenserver.instelling), and logs it; with conversation reuse
-- ('dialog_reuse_idle_seconds'), on the key's open dialog. @verzonden says whether it
-- sent: not when the key does not exist, nor when its Vraag cannot be built (then
-- recorded in Rekenserver.onverzendbaar with the reason).
-- Runs as the worker's user, so the worker owns the dialogs and its collector can end
-- them (END CONVERSATION requires the conversation's owner). READ COMMITTED whatever the
-- caller's level: under SNAPSHOT, two edits of one key would fail on the key's row
-- (Msg 3960); the level is the caller's again on return (SET TRANSACTION ISOLATION LEVEL).
CREATE OR ALTER PROCEDURE Rekenserver.stuur_vraag @dv int, @periode int, @verzonden bit = NULL OUTPUT,
    @herberekening bit = 0
WITH EXECUTE AS N'$(WorkerUser)'
AS
BEGIN
    SET NOCOUNT ON; SET XACT_ABORT ON;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    DECLARE @versie bigint, @group uniqueidentifier, @id uniqueidentifier = NEWID(), @vraag xml, @handle uniqueidentifier,
            @lifetime int = Rekenserver.dialog_levensduur(), @reden nvarchar(200), @reuse uniqueidentifier,
            @verloopt datetime2(3), @marge int;
    SET @verzonden = 0;
    SELECT @versie = versie, @group = group_id, @reuse = dialog_handle, @verloopt = dialog_verloopt
      FROM Rekenserver.sleutel WITH (UPDLOCK)
     WHERE dienstverband_id = @dv AND periode_id = @periode;
    IF @versie IS NULL RETURN;
    SET @vraag = Rekenserver.vraag(@dv, @periode, @versie, @id);
    IF @vraag IS NULL
    BEGIN
        SET @reden = CASE WHEN NOT EXISTS (SELECT 1 FROM Rooster.dienstverband WHERE id = @dv)
                              THEN CONCAT(N'dienstverband ', @dv, N' does not exist')
                          WHEN NOT EXISTS (SELECT 1 FROM Rooster.periode WHERE id = @periode)
                              THEN CONCAT(N'periode ', @periode, N' does not exist')
                          ELSE CONCAT(N'the CAO of dienstverband ', @dv, N' does not exist') END;
        UPDATE Rekenserver.onverzendbaar SET versie = @versie, reden = @reden, sinds = SYSUTCDATETIME()
         WHERE dienstverband_id = @dv AND periode_id = @periode;
        IF @@ROWCOUNT = 0
            INSERT Rekenserver.onverzendbaar (dienstverband_id, periode_id, versie, reden)
            VALUES (@dv, @periode, @versie, @reden);
        RETURN;
    END;
    -- A recompute's Vraag goes on its own contract, at its lower priority (a contract is
    -- an identifier in BEGIN DIALOG, not a variable: a statement each).
    -- (Each Service Broker statement in a BEGIN ... END of its own: no doubt how a parser
    -- binds it to its IF.)
    IF @herberekening = 1
    BEGIN
        BEGIN DIALOG CONVERSATION @handle
            FROM SERVICE [/Rekenserver/LoonfactorBerekening/DataService]
            TO SERVICE '/Rekenserver/LoonfactorBerekening/RekenService'
            ON CONTRACT [/Rekenserver/LoonfactorBerekening/HerberekenContract]
            WITH RELATED_CONVERSATION_GROUP = @group, LIFETIME = @lifetime, ENCRYPTION = OFF;
    END
    -- A dialog per request: reuse off; the self-test's scratch key (negative ids).
    ELSE IF @dv < 0 OR Rekenserver.dialoog_hergebruik() = 0
    BEGIN
        BEGIN DIALOG CONVERSATION @handle
            FROM SERVICE [/Rekenserver/LoonfactorBerekening/DataService]
            TO SERVICE '/Rekenserver/LoonfactorBerekening/RekenService'
            ON CONTRACT [/Rekenserver/LoonfactorBerekening/DataContract]
            WITH RELATED_CONVERSATION_GROUP = @group, LIFETIME = @lifetime, ENCRYPTION = OFF;
    END
    ELSE
    BEGIN
        -- Conversation reuse: the key's dialog, when every request sent on it has its
        -- outcome recorded, both sides have it open (state CO) and it is not near its
        -- LIFETIME's end (a margin of min(10 minutes, half the LIFETIME)). Messages on one
        -- dialog arrive in order. A SEND on a dialog the calculation has ended fails, and
        -- would roll back the planner's edit; SQL Server cannot check a dialog's state and
        -- send in one step (an incoming message changes it without a lock: Conversation
        -- Group Locks). The calculation ends a dialog only in answer to a request on it
        -- (a Fout, a diversion), and the collector records that answer and ends its side in
        -- one transaction. A dialog with no request open is ended by the collector only:
        -- on its idle timer (Rekenserver.dialoog_stil) or with an error it records
        -- (Rekenserver.noteer_fout: a diversion of its group, an Error), each of which
        -- first takes this key's row, which this procedure holds, and clears dialog_handle.
        -- (Or by an operator: END CONVERSATION WITH CLEANUP, SET ERROR_BROKER_CONVERSATIONS
        -- or NEW_BROKER, which may fail a planner's edit once.) A burst of edits of one key
        -- therefore takes a new dialog for each request in flight; the PostgreSQL broker
        -- checks and sends in one step (sb.ready_to_send) and reuses a busy dialog too.
        -- Adding a message to the target's queue takes no lock there, so the send never
        -- waits for the calculation.
        SET @marge = CASE WHEN @lifetime / 2 < 600 THEN @lifetime / 2 ELSE 600 END;
        IF @marge < 1 SET @marge = 1;
        IF @reuse IS NOT NULL
           AND @verloopt > DATEADD(SECOND, @marge, SYSUTCDATETIME())
           AND NOT EXISTS (SELECT 1 FROM Rekenserver.berekening_log l
                            WHERE l.dialog_handle = @reuse AND l.uitkomst IS NULL)
           AND Rekenserver.sleuteldialoog_staat(@reuse) = 'CO'
            SET @handle = @reuse;
        ELSE
        BEGIN
            BEGIN DIALOG CONVERSATION @handle
                FROM SERVICE [/Rekenserver/LoonfactorBerekening/DataService]
                TO SERVICE '/Rekenserver/LoonfactorBerekening/RekenService'
                ON CONTRACT [/Rekenserver/LoonfactorBerekening/SleutelContract]
                WITH RELATED_CONVERSATION_GROUP = @group, LIFETIME = @lifetime, ENCRYPTION = OFF;
            UPDATE Rekenserver.sleutel
               SET dialog_handle = @handle, dialog_verloopt = DATEADD(SECOND, @lifetime, SYSUTCDATETIME())
             WHERE dienstverband_id = @dv AND periode_id = @periode;
        END;
    END;
    SEND ON CONVERSATION @handle MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Vraag] (@vraag);
    -- The Vraag as sent, compressed, for the evidence of its result.
    INSERT Rekenserver.berekening_log (dialog_handle, vraag_id, dienstverband_id, periode_id, versie, vraag)
    VALUES (@handle, @id, @dv, @periode, @versie, COMPRESS(CAST(@vraag AS nvarchar(max))));
    DELETE Rekenserver.onverzendbaar WHERE dienstverband_id = @dv AND periode_id = @periode;
    SET @verzonden = 1;
END;
GO

-- Raises the versions of the touched keys and sends their Vraags (unless switched off
-- with sp_set_session_context N'vragen_uit', 1).
CREATE OR ALTER PROCEDURE Rekenserver.verstuur_vragen @sleutels nvarchar(max)
AS
BEGIN
    SET NOCOUNT ON; SET XACT_ABORT ON;
    -- Under a caller's SNAPSHOT isolation the MERGE below would fail on a key another
    -- transaction changed since this one began (Msg 3960); reset on return.
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    DECLARE @k TABLE (dv int NOT NULL, p int NOT NULL, PRIMARY KEY (dv, p));
    INSERT @k SELECT DISTINCT dv, p FROM OPENJSON(@sleutels) WITH (dv int '$.dv', p int '$.p');
    MERGE Rekenserver.sleutel WITH (HOLDLOCK) AS s
    USING @k AS k ON s.dienstverband_id = k.dv AND s.periode_id = k.p
    WHEN MATCHED THEN UPDATE SET versie = s.versie + 1, gewijzigd_op = SYSUTCDATETIME()
    WHEN NOT MATCHED THEN INSERT (dienstverband_id, periode_id, versie, group_id) VALUES (k.dv, k.p, 1, NEWID());
    IF CAST(SESSION_CONTEXT(N'vragen_uit') AS int) = 1 RETURN;
    DECLARE @dv int, @p int;
    DECLARE keys CURSOR LOCAL FAST_FORWARD FOR SELECT dv, p FROM @k ORDER BY dv, p;
    OPEN keys;
    FETCH NEXT FROM keys INTO @dv, @p;
    WHILE @@FETCH_STATUS = 0
    BEGIN
        EXEC Rekenserver.stuur_vraag @dv = @dv, @periode = @p;
        FETCH NEXT FROM keys INTO @dv, @p;
    END
    CLOSE keys; DEALLOCATE keys;
END;
GO

-- Keys the triggers never saw: a load that fires no trigger (bcp or BULK INSERT without
-- FIRE_TRIGGERS, SqlBulkCopy without SqlBulkCopyOptions.FireTriggers, TRUNCATE TABLE,
-- DISABLE TRIGGER) raises no version. This raises the version of every key of the
-- employees @dv_van..@dv_tot in the dates @datum_van..@datum_tot, both the keys of the
-- roster's duties there and the keys known before whose period overlaps the dates (their
-- duties may be gone), and sends nothing: Rekenserver.sweep sends them. Granted to
-- sbworker_housekeeping_role. Returns the number of keys raised.
--   EXEC Rekenserver.markeer_sleutels @dv_van = 1, @dv_tot = 2147483647,
--        @datum_van = '20260101', @datum_tot = '20261231';
CREATE OR ALTER PROCEDURE Rekenserver.markeer_sleutels @dv_van int, @dv_tot int, @datum_van date, @datum_tot date
AS
BEGIN
    -- Planners first in a deadlock (as Rekenserver.herbereken and the sweep).
    SET NOCOUNT ON; SET XACT_ABORT ON; SET DEADLOCK_PRIORITY LOW;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    IF @dv_van IS NULL OR @dv_tot IS NULL OR @datum_van IS NULL OR @datum_tot IS NULL
       OR @dv_van > @dv_tot OR @datum_van > @datum_tot
        THROW 50130, N'Rekenserver.markeer_sleutels needs two ranges, each from its lower to its upper bound', 1;
    DECLARE @k TABLE (dv int NOT NULL, p int NOT NULL, PRIMARY KEY (dv, p));
    INSERT @k (dv, p)
    SELECT d.dienstverband_id, p.id
      FROM Rooster.dienst d
      JOIN Rooster.dienstverband x ON x.id = d.dienstverband_id
      JOIN Rooster.cao c ON c.id = x.cao_id
      JOIN Rooster.periode p ON p.is_vier_weken = c.is_vier_weken AND d.datum BETWEEN p.begin_datum AND p.eind_datum
     WHERE d.dienstverband_id BETWEEN @dv_van AND @dv_tot AND d.datum BETWEEN @datum_van AND @datum_tot
    UNION
    SELECT s.dienstverband_id, s.periode_id
      FROM Rekenserver.sleutel s
      JOIN Rooster.periode p ON p.id = s.periode_id
     WHERE s.dienstverband_id BETWEEN @dv_van AND @dv_tot
       AND p.begin_datum <= @datum_tot AND p.eind_datum >= @datum_van;
    MERGE Rekenserver.sleutel WITH (HOLDLOCK) AS s
    USING @k AS k ON s.dienstverband_id = k.dv AND s.periode_id = k.p
    WHEN MATCHED THEN UPDATE SET versie = s.versie + 1, gewijzigd_op = SYSUTCDATETIME()
    WHEN NOT MATCHED THEN INSERT (dienstverband_id, periode_id, versie, group_id) VALUES (k.dv, k.p, 1, NEWID());
    SELECT @@ROWCOUNT AS gemarkeerd;
END;
GO

-- Recompute (`sbworker recompute --mssql`): the known keys that match every filter
-- given (NULL: no filter; @sleutels, a JSON array of {"dv", "p"}, names keys instead), in
-- key order after the key (@na_dv, @na_periode), at most @aantal. For a change no roster
-- edit makes: new rate tables, a CAO change, a corrected period. @periodes: a JSON array
-- of period ids.
CREATE OR ALTER PROCEDURE Rekenserver.herbereken_sleutels @periodes nvarchar(max) = NULL, @cao nvarchar(20) = NULL,
    @dv_van int = NULL, @dv_tot int = NULL, @na_dv int = NULL, @na_periode int = NULL, @aantal int,
    @sleutels nvarchar(max) = NULL
AS
BEGIN
    SET NOCOUNT ON;
    -- Compared as the column's type (no conversion on the column), after a check that it
    -- fits: a parameter is truncated to its type in silence (SET ANSI_WARNINGS).
    IF LEN(@cao) > 10 THROW 50131, N'@cao: a CAO code has at most 10 characters', 1;
    DECLARE @code varchar(10) = @cao;
    DECLARE @p TABLE (id int NOT NULL PRIMARY KEY);
    DECLARE @k TABLE (dv int NOT NULL, p int NOT NULL, PRIMARY KEY (dv, p));
    INSERT @p (id) SELECT DISTINCT CAST(value AS int) FROM OPENJSON(@periodes);
    INSERT @k (dv, p) SELECT DISTINCT dv, p FROM OPENJSON(@sleutels) WITH (dv int '$.dv', p int '$.p');
    SET @na_dv = ISNULL(@na_dv, -2147483648);
    SET @na_periode = ISNULL(@na_periode, -2147483648);
    SELECT TOP (@aantal) s.dienstverband_id, s.periode_id
      FROM Rekenserver.sleutel s
      JOIN Rooster.dienstverband dv ON dv.id = s.dienstverband_id
      JOIN Rooster.cao c ON c.id = dv.cao_id
     WHERE (s.dienstverband_id > @na_dv OR (s.dienstverband_id = @na_dv AND s.periode_id > @na_periode))
       AND (@periodes IS NULL OR s.periode_id IN (SELECT id FROM @p))
       AND (@code IS NULL OR c.code = @code)
       AND (@dv_van IS NULL OR s.dienstverband_id >= @dv_van)
       AND (@dv_tot IS NULL OR s.dienstverband_id <= @dv_tot)
       AND (@sleutels IS NULL OR EXISTS (SELECT 1 FROM @k k WHERE k.dv = s.dienstverband_id AND k.p = s.periode_id))
     ORDER BY s.dienstverband_id, s.periode_id;
END;
GO

-- Recomputes these keys (@sleutels, a JSON array of {"dv", "p"}) as a roster edit does,
-- in the caller's transaction: each key's version rises and its Vraag, built from the
-- data as it stands now, is sent on the recompute's contract (priority 3), in key
-- order. Returns how many were sent (a key whose Vraag cannot be built is recorded in
-- Rekenserver.onverzendbaar).
CREATE OR ALTER PROCEDURE Rekenserver.herbereken @sleutels nvarchar(max)
AS
BEGIN
    -- Planners first in a deadlock too: at equal priority SQL Server rolls back the
    -- cheaper transaction, a planner's edit rather than this batch (SET DEADLOCK_PRIORITY:
    -- "the session that is less expensive to roll back"). LOW makes this batch the
    -- victim; `sbworker recompute` takes it again. (Restored when the procedure returns;
    -- every lock wait of the batch is in here.)
    SET NOCOUNT ON; SET XACT_ABORT ON; SET DEADLOCK_PRIORITY LOW;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    DECLARE @k TABLE (dv int NOT NULL, p int NOT NULL, PRIMARY KEY (dv, p));
    INSERT @k SELECT DISTINCT dv, p FROM OPENJSON(@sleutels) WITH (dv int '$.dv', p int '$.p');
    DECLARE @dv int, @p int, @verzonden bit, @n int = 0;
    DECLARE keys CURSOR LOCAL FAST_FORWARD FOR SELECT dv, p FROM @k ORDER BY dv, p;
    OPEN keys;
    FETCH NEXT FROM keys INTO @dv, @p;
    WHILE @@FETCH_STATUS = 0
    BEGIN
        UPDATE Rekenserver.sleutel SET versie = versie + 1, gewijzigd_op = SYSUTCDATETIME()
         WHERE dienstverband_id = @dv AND periode_id = @p;
        IF @@ROWCOUNT = 1
        BEGIN
            EXEC Rekenserver.stuur_vraag @dv = @dv, @periode = @p, @verzonden = @verzonden OUTPUT, @herberekening = 1;
            SET @n += CAST(@verzonden AS int);
        END
        FETCH NEXT FROM keys INTO @dv, @p;
    END
    CLOSE keys; DEALLOCATE keys;
    SELECT @n AS verzonden;
END;
GO

-- The keys (dienstverband, periode) of duties on dates, as JSON for verstuur_vragen.
CREATE OR ALTER FUNCTION Rooster.sleutels_json (@duties nvarchar(max))
RETURNS nvarchar(max)
AS
BEGIN
    RETURN (SELECT DISTINCT d.dv, p.id AS p
              FROM OPENJSON(@duties) WITH (dv int '$.dv', datum date '$.datum') d
              JOIN Rooster.dienstverband x ON x.id = d.dv
              JOIN Rooster.cao c ON c.id = x.cao_id
              JOIN Rooster.periode p ON p.is_vier_weken = c.is_vier_weken AND d.datum BETWEEN p.begin_datum AND p.eind_datum
               FOR JSON PATH);
END;
GO

CREATE OR ALTER TRIGGER Rooster.dienst_gewijzigd ON Rooster.dienst AFTER INSERT, UPDATE, DELETE
AS
BEGIN
    SET NOCOUNT ON;
    -- FOR JSON over a UNION in a subquery is refused (Msg 1086): the union is a derived table.
    DECLARE @duties nvarchar(max) = (SELECT u.dv, u.datum
                                       FROM (SELECT dienstverband_id AS dv, datum FROM inserted
                                             UNION SELECT dienstverband_id, datum FROM deleted) u
                                        FOR JSON PATH);
    DECLARE @keys nvarchar(max) = Rooster.sleutels_json(@duties);
    IF @keys IS NOT NULL EXEC Rekenserver.verstuur_vragen @sleutels = @keys;
END;
GO

CREATE OR ALTER TRIGGER Rooster.tijdblok_gewijzigd ON Rooster.tijdblok AFTER INSERT, UPDATE, DELETE
AS
BEGIN
    SET NOCOUNT ON;
    DECLARE @duties nvarchar(max) = (SELECT d.dienstverband_id AS dv, d.datum
                                       FROM (SELECT dienst_id FROM inserted UNION SELECT dienst_id FROM deleted) t
                                       JOIN Rooster.dienst d ON d.id = t.dienst_id FOR JSON PATH);
    DECLARE @keys nvarchar(max) = Rooster.sleutels_json(@duties);
    IF @keys IS NOT NULL EXEC Rekenserver.verstuur_vragen @sleutels = @keys;
END;
GO

CREATE OR ALTER TRIGGER Rooster.dienstverband_gewijzigd ON Rooster.dienstverband AFTER UPDATE
AS
BEGIN
    SET NOCOUNT ON;
    DECLARE @duties nvarchar(max) = (SELECT d.dienstverband_id AS dv, d.datum
                                       FROM Rooster.dienst d JOIN inserted i ON i.id = d.dienstverband_id FOR JSON PATH);
    DECLARE @keys nvarchar(max) = Rooster.sleutels_json(@duties);
    IF @keys IS NOT NULL EXEC Rekenserver.verstuur_vragen @sleutels = @keys;
END;
GO

-- The keys a search picks, for the web page (`sbworker web`, /sleutels), as
-- rekenserver.sleutels_zoek on PostgreSQL: in key order, after (@na_dv, @na_periode),
-- at most @aantal, each with its CAO, roster version, stored result and export, and the
-- Fout that answered its current version if no result of it was stored after. A NULL
-- filter picks all (@staat: 'opgeslagen', 'wacht' or 'fout'; @reden: a text that Fout
-- holds, by CHARINDEX under the column's collation). Keys in the order of pk_sleutel,
-- each key's Fout through ix_berekening_log_key (OUTER APPLY ... TOP (1)). OPTION
-- (RECOMPILE): each call is planned for its own filters, so a search by one
-- dienstverband seeks pk_sleutel.
CREATE OR ALTER PROCEDURE Rekenserver.sleutels_zoek
    @dv int = NULL, @periode int = NULL, @cao nvarchar(20) = NULL, @staat varchar(12) = NULL,
    @reden nvarchar(3000) = NULL, @na_dv int = NULL, @na_periode int = NULL, @aantal int = 50
AS
BEGIN
    SET NOCOUNT ON;
    SET CONCAT_NULL_YIELDS_NULL ON;   -- a NULL time + N'Z' stays NULL
    SELECT TOP (@aantal) s.dienstverband_id, s.periode_id, c.code AS cao, s.versie,
           CONVERT(nvarchar(33), s.gewijzigd_op, 126) + N'Z' AS gewijzigd_op, r.versie AS opgeslagen_versie,
           CONVERT(nvarchar(33), r.opgeslagen_op, 126) + N'Z' AS opgeslagen_op,
           CAST(r.export_status AS int) AS export_status, f.foutmelding AS fout
      FROM Rekenserver.sleutel s
      LEFT JOIN Rooster.dienstverband dv ON dv.id = s.dienstverband_id
      LEFT JOIN Rooster.cao c ON c.id = dv.cao_id
      LEFT JOIN Rekenserver.resultaat r ON r.dienstverband_id = s.dienstverband_id AND r.periode_id = s.periode_id
      OUTER APPLY (SELECT TOP (1) l.foutmelding FROM Rekenserver.berekening_log l
                    WHERE l.dienstverband_id = s.dienstverband_id AND l.periode_id = s.periode_id
                      AND l.versie = s.versie AND l.uitkomst = 'fout' AND ISNULL(r.versie, 0) < s.versie
                    ORDER BY l.beantwoord_op DESC) f
     WHERE (@dv IS NULL OR s.dienstverband_id = @dv)
       AND (@periode IS NULL OR s.periode_id = @periode)
       AND (@cao IS NULL OR c.code = @cao)
       AND (@staat IS NULL
            OR (@staat = 'opgeslagen' AND r.versie = s.versie)
            OR (@staat = 'wacht' AND s.versie > ISNULL(r.versie, 0) AND f.foutmelding IS NULL)
            OR (@staat = 'fout' AND f.foutmelding IS NOT NULL))
       AND (@reden IS NULL OR CHARINDEX(@reden, f.foutmelding) > 0)
       AND (@na_dv IS NULL OR s.dienstverband_id > @na_dv OR (s.dienstverband_id = @na_dv AND s.periode_id > @na_periode))
     ORDER BY s.dienstverband_id, s.periode_id
    OPTION (RECOMPILE);
END;
GO

-- Every Vraag sent for a key that the calculation log still holds, oldest first, with
-- its outcome (through ix_berekening_log_key).
CREATE OR ALTER PROCEDURE Rekenserver.sleutel_tijdlijn @dv int, @periode int
AS
BEGIN
    SET NOCOUNT ON;
    SET CONCAT_NULL_YIELDS_NULL ON;   -- a NULL time + N'Z' stays NULL
    SELECT l.versie, CONVERT(nvarchar(33), l.verzonden_op, 126) + N'Z' AS verzonden_op,
           CONVERT(nvarchar(33), l.beantwoord_op, 126) + N'Z' AS beantwoord_op, l.uitkomst, l.foutmelding
      FROM Rekenserver.berekening_log l
     WHERE l.dienstverband_id = @dv AND l.periode_id = @periode
     ORDER BY l.verzonden_op, l.versie;
END;
GO

SET NOEXEC OFF;
GO
