-- sbworker on SQL Server, script 03: the initiator's side of the pipeline: stored
-- results (latest version wins), the log of stored versions, the calculation log (seed
-- 004's LoonfactorBerekeningLog), the store procedure the Rust collector calls, and,
-- as an option, an internal activation procedure doing the same inside the database.

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

-- The roster side only (Side roster or both: docs/sqlserver.md, "Two databases, two
-- servers"): the collector stores the answers where the roster and its results are.
IF '$(Side)' NOT IN ('both', 'roster') SET NOEXEC ON;   -- the roster side only, to SET NOEXEC OFF at the end
GO

IF OBJECT_ID(N'Rekenserver.resultaat', N'U') IS NULL
    CREATE TABLE Rekenserver.resultaat (
        dienstverband_id int NOT NULL,
        periode_id       int NOT NULL,
        versie           bigint NOT NULL,
        vraag_id         uniqueidentifier NOT NULL,
        dialog_handle    uniqueidentifier NOT NULL,
        opgeslagen_op    datetime2(3) NOT NULL CONSTRAINT df_resultaat_op DEFAULT SYSUTCDATETIME(),
        export_status    tinyint NOT NULL CONSTRAINT df_resultaat_export DEFAULT 0
                         CONSTRAINT ck_resultaat_export CHECK (export_status IN (0, 1, 2)),
        export_batch     uniqueidentifier NULL,
        geclaimd_op      datetime2(3) NULL,
        geexporteerd_op  datetime2(3) NULL,
        CONSTRAINT pk_resultaat PRIMARY KEY (dienstverband_id, periode_id),
        INDEX ix_resultaat_export (periode_id, export_status),
        INDEX ix_resultaat_batch (export_batch));
GO
-- A result that replaces one exported before is a correction: the exported version it
-- replaces, set when it is stored (the export marks it in its output). Added to an
-- existing install too.
IF COL_LENGTH(N'Rekenserver.resultaat', N'vorige_export_versie') IS NULL
    ALTER TABLE Rekenserver.resultaat ADD vorige_export_versie bigint NULL;
-- The version payroll received (once) or may hold (claimed under a lease): set by the
-- claim, kept when a version with the same figures is stored (which moves `versie` but
-- sends nothing), so the next correction names what payroll has. Rows claimed before
-- the column existed take their own version (the best there is to know).
-- The stored version's warnings (the Antwoord's Waarschuwing elements as JSON
-- [{"code", "tekst"}], NULL for none): the export hands them to payroll with the figures.
IF COL_LENGTH(N'Rekenserver.resultaat', N'waarschuwingen') IS NULL
    ALTER TABLE Rekenserver.resultaat ADD waarschuwingen nvarchar(max) NULL;
IF COL_LENGTH(N'Rekenserver.resultaat', N'geexporteerde_versie') IS NULL
BEGIN
    ALTER TABLE Rekenserver.resultaat ADD geexporteerde_versie bigint NULL;
    -- (Dynamic: the column is new to this batch's compilation.)
    EXEC sp_executesql N'UPDATE Rekenserver.resultaat SET geexporteerde_versie = versie
                          WHERE geexporteerde_versie IS NULL AND export_status IN (1, 2)';
END
GO

IF OBJECT_ID(N'Rekenserver.resultaat_factor', N'U') IS NULL
    CREATE TABLE Rekenserver.resultaat_factor (
        dienstverband_id int NOT NULL,
        periode_id       int NOT NULL,
        kaart_soort      int NOT NULL,
        loonfactor_code  varchar(3) NOT NULL,
        waarde           decimal(18, 4) NOT NULL,
        CONSTRAINT pk_resultaat_factor PRIMARY KEY (dienstverband_id, periode_id, loonfactor_code),
        CONSTRAINT fk_resultaat_factor FOREIGN KEY (dienstverband_id, periode_id)
            REFERENCES Rekenserver.resultaat ON DELETE CASCADE);
GO

IF OBJECT_ID(N'Rekenserver.resultaat_historie', N'U') IS NULL
    CREATE TABLE Rekenserver.resultaat_historie (
        id               bigint IDENTITY PRIMARY KEY,
        dienstverband_id int NOT NULL,
        periode_id       int NOT NULL,
        versie           bigint NOT NULL,
        opgeslagen_op    datetime2(3) NOT NULL CONSTRAINT df_historie_op DEFAULT SYSUTCDATETIME(),
        INDEX ix_resultaat_historie_key (dienstverband_id, periode_id, id));
GO

IF OBJECT_ID(N'Rekenserver.berekening_log', N'U') IS NULL
    CREATE TABLE Rekenserver.berekening_log (
        dialog_handle    uniqueidentifier NOT NULL,
        vraag_id         uniqueidentifier NOT NULL,
        dienstverband_id int NOT NULL,
        periode_id       int NOT NULL,
        versie           bigint NOT NULL,
        verzonden_op     datetime2(3) NOT NULL CONSTRAINT df_log_verzonden DEFAULT SYSUTCDATETIME(),
        beantwoord_op    datetime2(3) NULL,
        uitkomst         varchar(10) NULL
                         CONSTRAINT ck_log_uitkomst CHECK (uitkomst IN ('opgeslagen', 'verouderd', 'vervangen', 'fout')),
        foutmelding      nvarchar(3000) NULL,
        CONSTRAINT pk_berekening_log PRIMARY KEY (dialog_handle, vraag_id),
        INDEX ix_berekening_log_key (dienstverband_id, periode_id, versie));
GO
-- A reused dialog carries several requests (conversation reuse, below): a row per request
-- and dialog. An install from before kept a row per dialog, when each dialog carried
-- one: its key gets the second column. The rows stay, but the table and its indexes are
-- rebuilt twice (dropping the clustered key makes it a heap) under a schema lock, which
-- the roster's triggers wait for: on a large log, install in a quiet hour. One
-- transaction: a failure leaves the old key, and the next install tries again.
IF (SELECT COUNT(*) FROM sys.key_constraints k
      JOIN sys.index_columns ic ON ic.object_id = k.parent_object_id AND ic.index_id = k.unique_index_id
     WHERE k.name = N'pk_berekening_log' AND k.parent_object_id = OBJECT_ID(N'Rekenserver.berekening_log')
       AND ic.key_ordinal > 0) <> 2
BEGIN
    BEGIN TRY
        BEGIN TRANSACTION;
        IF OBJECT_ID(N'Rekenserver.pk_berekening_log', N'PK') IS NOT NULL
            ALTER TABLE Rekenserver.berekening_log DROP CONSTRAINT pk_berekening_log;
        ALTER TABLE Rekenserver.berekening_log ADD CONSTRAINT pk_berekening_log PRIMARY KEY (dialog_handle, vraag_id);
        COMMIT TRANSACTION;
    END TRY
    BEGIN CATCH
        IF XACT_STATE() <> 0 ROLLBACK TRANSACTION;
        THROW;
    END CATCH
END
GO
-- Requests without an outcome, for Rekenserver.markeer_verloren (every sweep run), and the
-- sweep's retention of answered ones (by outcome, then when it came: of the rows it
-- keeps, only each key's current Fouts are read again). A plain index: a filtered one would make every writer of the log
-- (the roster's triggers) depend on its session's SET options. The collector sets
-- uitkomst and beantwoord_op in one UPDATE, so the second key column costs no extra
-- index write. The builds before keyed it on uitkomst alone: rebuilt with the second
-- key column (DROP_EXISTING, offline: install in a quiet moment).
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE name = N'ix_berekening_log_uitkomst'
                AND object_id = OBJECT_ID(N'Rekenserver.berekening_log'))
    CREATE INDEX ix_berekening_log_uitkomst ON Rekenserver.berekening_log (uitkomst, beantwoord_op)
        INCLUDE (dialog_handle);
GO
IF NOT EXISTS (SELECT 1 FROM sys.index_columns c
                 JOIN sys.indexes i ON i.object_id = c.object_id AND i.index_id = c.index_id
                WHERE i.name = N'ix_berekening_log_uitkomst' AND i.object_id = OBJECT_ID(N'Rekenserver.berekening_log')
                  AND c.key_ordinal = 2 AND COL_NAME(c.object_id, c.column_id) = N'beantwoord_op')
    CREATE INDEX ix_berekening_log_uitkomst ON Rekenserver.berekening_log (uitkomst, beantwoord_op)
        INCLUDE (dialog_handle) WITH (DROP_EXISTING = ON);
GO

-- Evidence of every stored result (`sbworker explain`): the Vraag as sent is kept,
-- compressed (COMPRESS: gzip of its nvarchar text), in the log row of its request until
-- the outcome, and the collector copies it, with the Antwoord's factors (a JSON array of
-- {"c": code, "w": value as text}) and what computed it (its Rekenversie), into the
-- stored version's resultaat_historie row; the export writes when each version went out.
-- Pruned by Rekenserver.sweep after @evidence_retention_months, counted from the day a
-- newer version replaced it; a key's latest version stays.
IF COL_LENGTH(N'Rekenserver.berekening_log', N'vraag') IS NULL
    ALTER TABLE Rekenserver.berekening_log ADD vraag varbinary(max) NULL;
GO
IF COL_LENGTH(N'Rekenserver.resultaat_historie', N'vraag') IS NULL
    ALTER TABLE Rekenserver.resultaat_historie ADD vraag varbinary(max) NULL;
GO
IF COL_LENGTH(N'Rekenserver.resultaat_historie', N'factoren') IS NULL
    ALTER TABLE Rekenserver.resultaat_historie ADD factoren nvarchar(max) NULL;
GO
IF COL_LENGTH(N'Rekenserver.resultaat_historie', N'rekenversie') IS NULL
    ALTER TABLE Rekenserver.resultaat_historie ADD rekenversie nvarchar(200) NULL;
GO
IF COL_LENGTH(N'Rekenserver.resultaat_historie', N'geexporteerd_op') IS NULL
    ALTER TABLE Rekenserver.resultaat_historie ADD geexporteerd_op datetime2(3) NULL;
GO
-- When a newer version replaced this one (Rekenserver.sla_antwoord_op stamps it as it
-- stores the newer; NULL: the key's latest). The retention counts from it and seeks its
-- index to the rows it may delete: a key's latest version, kept however old, is never
-- read (its NULL sorts before every date). Versions stored before the column existed
-- take their successor's time, once: in the transaction that adds the column (a failed
-- fill leaves no column, and the next install tries again; the UPDATE is compiled only
-- then, by sp_executesql, as the column does not exist at parse time).
IF COL_LENGTH(N'Rekenserver.resultaat_historie', N'vervangen_op') IS NULL
BEGIN
    BEGIN TRY
        BEGIN TRANSACTION;
        ALTER TABLE Rekenserver.resultaat_historie ADD vervangen_op datetime2(3) NULL;
        EXEC sys.sp_executesql N'UPDATE h SET vervangen_op = (SELECT MIN(n.opgeslagen_op)
                                                                FROM Rekenserver.resultaat_historie n
                                                               WHERE n.dienstverband_id = h.dienstverband_id
                                                                 AND n.periode_id = h.periode_id AND n.versie > h.versie)
                                   FROM Rekenserver.resultaat_historie h
                                  WHERE EXISTS (SELECT 1 FROM Rekenserver.resultaat_historie n
                                                 WHERE n.dienstverband_id = h.dienstverband_id
                                                   AND n.periode_id = h.periode_id AND n.versie > h.versie);';
        COMMIT TRANSACTION;
    END TRY
    BEGIN CATCH
        IF XACT_STATE() <> 0 ROLLBACK TRANSACTION;
        THROW;
    END CATCH
END
GO
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE name = N'ix_resultaat_historie_vervangen'
                AND object_id = OBJECT_ID(N'Rekenserver.resultaat_historie'))
    CREATE INDEX ix_resultaat_historie_vervangen ON Rekenserver.resultaat_historie (vervangen_op);
GO
-- The retention's index of the builds before (by opgeslagen_op), which nothing reads now
-- and every stored version would still write.
IF EXISTS (SELECT 1 FROM sys.indexes WHERE name = N'ix_resultaat_historie_opgeslagen'
            AND object_id = OBJECT_ID(N'Rekenserver.resultaat_historie'))
    DROP INDEX ix_resultaat_historie_opgeslagen ON Rekenserver.resultaat_historie;
GO

-- Settings of the database side. One so far: the LIFETIME, in seconds, of every dialog
-- the roster and a replay begin (no row: 7 days). A dialog still open then ends with
-- the broker's error (-8489) on both sides, which the collector records as the
-- environment's fault, so the sweep sends its key again: a lost request is found, at
-- the latest, a lifetime after it was sent. It must outlive the longest backlog.
--   INSERT Rekenserver.instelling (naam, waarde) VALUES ('dialog_lifetime_seconds', 86400);
IF OBJECT_ID(N'Rekenserver.instelling', N'U') IS NULL
    CREATE TABLE Rekenserver.instelling (
        naam  varchar(60) NOT NULL CONSTRAINT pk_instelling PRIMARY KEY
              CONSTRAINT ck_instelling_naam CHECK (naam IN ('dialog_lifetime_seconds', 'dialog_reuse_idle_seconds')),
        waarde int NOT NULL CONSTRAINT ck_instelling_waarde CHECK (waarde >= 1));
GO
-- The second setting: 'dialog_reuse_idle_seconds', conversation reuse. With it, a key's
-- dialog (on the contract SleutelContract) carries the key's next versions, and ends once
-- the key has had no request open for that many seconds (no row: a dialog per request).
-- Recomputes and the self-test's scratch key keep a dialog per request.
--   INSERT Rekenserver.instelling (naam, waarde) VALUES ('dialog_reuse_idle_seconds', 10);
-- The check of an install from before names the first setting only: replaced, once, in
-- one transaction (a failure leaves the old check, and the next install tries again).
IF NOT EXISTS (SELECT 1 FROM sys.check_constraints c
                WHERE c.name = N'ck_instelling_naam' AND c.parent_object_id = OBJECT_ID(N'Rekenserver.instelling')
                  AND c.[definition] LIKE N'%dialog[_]reuse[_]idle[_]seconds%')
BEGIN
    BEGIN TRY
        BEGIN TRANSACTION;
        IF OBJECT_ID(N'Rekenserver.ck_instelling_naam', N'C') IS NOT NULL
            ALTER TABLE Rekenserver.instelling DROP CONSTRAINT ck_instelling_naam;
        ALTER TABLE Rekenserver.instelling ADD CONSTRAINT ck_instelling_naam
            CHECK (naam IN ('dialog_lifetime_seconds', 'dialog_reuse_idle_seconds'));
        COMMIT TRANSACTION;
    END TRY
    BEGIN CATCH
        IF XACT_STATE() <> 0 ROLLBACK TRANSACTION;
        THROW;
    END CATCH
END
GO

CREATE OR ALTER FUNCTION Rekenserver.dialoog_hergebruik ()
RETURNS int
AS
BEGIN
    RETURN ISNULL((SELECT waarde FROM Rekenserver.instelling WHERE naam = 'dialog_reuse_idle_seconds'), 0);
END;
GO

-- The state (sys.conversation_endpoints: CO conversing, DI, DO, ER, CD, ...) of a reused
-- dialog's endpoint `@handle`; NULL when there is none or it is on another contract. As
-- the owner: the catalog view shows a user only the endpoints of what it owns or has a
-- permission on (metadata visibility), and a check that silently saw nothing would keep
-- every dialog open to its LIFETIME (as Rekenserver.markeer_verloren reads it).
CREATE OR ALTER FUNCTION Rekenserver.sleuteldialoog_staat (@handle uniqueidentifier)
RETURNS char(2)
WITH EXECUTE AS OWNER
AS
BEGIN
    RETURN (SELECT e.state FROM sys.conversation_endpoints e
              JOIN sys.service_contracts c ON c.service_contract_id = e.service_contract_id
             WHERE e.conversation_handle = @handle AND c.name = N'/Rekenserver/LoonfactorBerekening/SleutelContract');
END;
GO

CREATE OR ALTER FUNCTION Rekenserver.dialog_levensduur ()
RETURNS int
AS
BEGIN
    RETURN ISNULL((SELECT waarde FROM Rekenserver.instelling WHERE naam = 'dialog_lifetime_seconds'), 604800);
END;
GO

-- Whether a failure (uitkomst 'fout') was the environment's, not the request's, so that
-- the sweep sends the same version again: an internal Fout (a diversion), an error end
-- (a diversion that sent no Fout, an expired LIFETIME, a broker error), a lost dialog
-- (Rekenserver.markeer_verloren). Written by whoever records the failure, never parsed
-- from the text. Rows of an older install get it from their text, in the formats the
-- collectors wrote (the in-database collector's 'error: ' too).
IF COL_LENGTH(N'Rekenserver.berekening_log', N'herstelbaar') IS NULL
BEGIN
    ALTER TABLE Rekenserver.berekening_log ADD herstelbaar bit NULL;
    EXEC sys.sp_executesql N'UPDATE Rekenserver.berekening_log
           SET herstelbaar = CASE WHEN foutmelding LIKE N''internal (%'' OR foutmelding LIKE N''error %''
                                       OR foutmelding LIKE N''error: %'' THEN 1 ELSE 0 END
         WHERE uitkomst = ''fout'';';
END
GO

-- Stores an Antwoord (nodes() and value(), as in the original system): replaces the key's
-- factors only when its version is newer than the stored one, logs the version, and
-- completes the calculation log. One result row per outcome: opgeslagen, verouderd
-- (older than the stored result) or vervangen (answered as superseded).
-- The outcome as a result set (the Rust collector reads it), or with @zonder_resultaat =
-- 1 only in the OUTPUT parameter @uitkomst_uit (the in-database collector below: no
-- INSERT ... EXEC around a procedure that may begin a conversation timer, N7 of the
-- fourth review).
CREATE OR ALTER PROCEDURE Rekenserver.sla_antwoord_op @handle uniqueidentifier, @antwoord xml,
    @uitkomst_uit varchar(10) = NULL OUTPUT, @zonder_resultaat bit = 0
AS
BEGIN
    SET NOCOUNT ON; SET XACT_ABORT ON;
    -- The run-time options xml methods need, whatever the caller's session has
    -- (QUOTED_IDENTIFIER and ANSI_NULLS were fixed when this procedure was created).
    SET ANSI_PADDING ON; SET ANSI_WARNINGS ON; SET ARITHABORT ON; SET CONCAT_NULL_YIELDS_NULL ON;
    SET NUMERIC_ROUNDABORT OFF;
    DECLARE @dv int, @periode int, @versie bigint, @vraag uniqueidentifier, @vervangen bit, @uitkomst varchar(10),
            @dubbel varchar(3), @rekenversie nvarchar(200), @stil int;
    -- Each wage factor code once (as the XSD's xs:unique and the decoder say): a second
    -- value for a code is refused with a reason, not by a key violation.
    WITH XMLNAMESPACES (DEFAULT 'http://www.sdbgroep.nl/MPlus/Rekenserver/2008')
    SELECT TOP (1) @dubbel = x.code
      FROM (SELECT m.value('(LoonfactorCode)[1]', 'varchar(3)') AS code
              FROM @antwoord.nodes('/LoonfactorBerekeningAntwoord/VariabeleMutatie') AS t(m)) AS x
     GROUP BY x.code   -- xml methods cannot stand in a GROUP BY (Msg 4148): a derived table
    HAVING COUNT(*) > 1;
    IF @dubbel IS NOT NULL
    BEGIN
        DECLARE @melding nvarchar(2048) = REPLACE(CONCAT(N'invalid-value: LoonfactorCode ', @dubbel,
            N' appears more than once in the Antwoord: each code appears once'), N'%', N'%%');  -- THROW reserves %
        THROW 50012, @melding, 1;
    END;
    WITH XMLNAMESPACES (DEFAULT 'http://www.sdbgroep.nl/MPlus/Rekenserver/2008')
    SELECT @dv = @antwoord.value('(/LoonfactorBerekeningAntwoord/@DienstverbandId)[1]', 'int'),
           @periode = @antwoord.value('(/LoonfactorBerekeningAntwoord/@PeriodeId)[1]', 'int'),
           @versie = @antwoord.value('(/LoonfactorBerekeningAntwoord/@Versie)[1]', 'bigint'),
           @vraag = @antwoord.value('(/LoonfactorBerekeningAntwoord/@Id)[1]', 'uniqueidentifier'),
           @rekenversie = @antwoord.value('(/LoonfactorBerekeningAntwoord/@Rekenversie)[1]', 'nvarchar(200)'),
           @vervangen = @antwoord.exist('/LoonfactorBerekeningAntwoord/Waarschuwing[@Code = "vervangen"]');
    -- The answer must be for a request its dialog carried (a reused dialog carries several:
    -- the one the Antwoord names): an answer naming another key, version or request is
    -- refused (the transaction fails; after the worker's attempts it is set aside), never
    -- stored under the wrong key.
    IF EXISTS (SELECT 1 FROM Rekenserver.berekening_log WHERE dialog_handle = @handle)
       AND NOT EXISTS (SELECT 1 FROM Rekenserver.berekening_log
                        WHERE dialog_handle = @handle AND vraag_id = @vraag AND dienstverband_id = @dv
                          AND periode_id = @periode AND versie = @versie)
    BEGIN
        SET @melding = REPLACE(CONCAT(N'invalid-value: the Antwoord on dialog ', @handle, N' is for dienstverband ', @dv,
            N', periode ', @periode, N', version ', @versie, N', not for the request its dialog carried'), N'%', N'%%');
        THROW 50013, @melding, 1;
    END;
    IF @vervangen = 1
        SET @uitkomst = 'vervangen';
    ELSE
    BEGIN
        -- The same factors as the stored result (a recompute that changed nothing): the
        -- new version is stored, but its export state stays (payroll has these figures;
        -- no correction is sent for nothing). One collector stores a key at a time (its
        -- conversation group), so the comparison and the update see the same rows.
        DECLARE @nieuw TABLE (kaart_soort int NOT NULL, loonfactor_code varchar(3) NOT NULL PRIMARY KEY,
                              waarde decimal(18, 4) NOT NULL);
        WITH XMLNAMESPACES (DEFAULT 'http://www.sdbgroep.nl/MPlus/Rekenserver/2008')
        INSERT @nieuw (kaart_soort, loonfactor_code, waarde)
        SELECT m.value('(KaartSoort)[1]', 'int'), m.value('(LoonfactorCode)[1]', 'varchar(3)'),
               m.value('(Waarde)[1]', 'decimal(18, 4)')
          FROM @antwoord.nodes('/LoonfactorBerekeningAntwoord/VariabeleMutatie') AS t(m);
        -- Only a result claimed or exported has an export state to keep: one still
        -- waiting (the pipeline's usual case) is not compared. A factor at 0 and a factor
        -- absent are the same figure (a release that adds a factor answers it at 0).
        -- The row is locked before its export state is read (N8 of the fourth review): a
        -- claim between the read and the update would make the same figures a correction.
        DECLARE @zelfde bit = 0, @status tinyint;
        SELECT @status = export_status FROM Rekenserver.resultaat WITH (UPDLOCK, HOLDLOCK)
         WHERE dienstverband_id = @dv AND periode_id = @periode;
        IF @status <> 0
            SET @zelfde = CASE
                WHEN NOT EXISTS (SELECT kaart_soort, loonfactor_code, waarde FROM @nieuw WHERE waarde <> 0
                                 EXCEPT SELECT kaart_soort, loonfactor_code, waarde FROM Rekenserver.resultaat_factor
                                         WHERE dienstverband_id = @dv AND periode_id = @periode)
                 AND NOT EXISTS (SELECT kaart_soort, loonfactor_code, waarde FROM Rekenserver.resultaat_factor
                                  WHERE dienstverband_id = @dv AND periode_id = @periode AND waarde <> 0
                                 EXCEPT SELECT kaart_soort, loonfactor_code, waarde FROM @nieuw)
                THEN 1 ELSE 0 END;
        -- Its warnings for payroll (the superseded marker is none). The namespace in the
        -- XQuery prolog: WITH XMLNAMESPACES does not go with FOR JSON.
        DECLARE @waarschuwingen nvarchar(max) = (
            SELECT w.value('@Code', 'nvarchar(100)') AS code, w.value('.', 'nvarchar(max)') AS tekst
              FROM @antwoord.nodes('declare default element namespace "http://www.sdbgroep.nl/MPlus/Rekenserver/2008";
                                    /LoonfactorBerekeningAntwoord/Waarschuwing[@Code != "vervangen"]') AS t(w)
               FOR JSON PATH);
        UPDATE Rekenserver.resultaat WITH (UPDLOCK, HOLDLOCK)
           SET versie = @versie, vraag_id = @vraag, dialog_handle = @handle, opgeslagen_op = SYSUTCDATETIME(),
               waarschuwingen = @waarschuwingen,
               -- (Every expression reads the row as it was before the update.)
               -- Exported, or claimed under a lease (payroll may hold it already).
               -- The version payroll has, not the stored one: a version with the same
               -- figures may have moved `versie` past it.
               vorige_export_versie = CASE WHEN @zelfde = 1 THEN vorige_export_versie
                                           WHEN export_status IN (1, 2) THEN ISNULL(geexporteerde_versie, versie)
                                           ELSE vorige_export_versie END,
               export_status = CASE WHEN @zelfde = 1 THEN export_status ELSE 0 END,
               export_batch = CASE WHEN @zelfde = 1 THEN export_batch END,
               geclaimd_op = CASE WHEN @zelfde = 1 THEN geclaimd_op END,
               geexporteerd_op = CASE WHEN @zelfde = 1 THEN geexporteerd_op END
         WHERE dienstverband_id = @dv AND periode_id = @periode AND versie < @versie;
        IF @@ROWCOUNT = 0 AND NOT EXISTS (SELECT 1 FROM Rekenserver.resultaat WITH (UPDLOCK, HOLDLOCK)
                                           WHERE dienstverband_id = @dv AND periode_id = @periode)
            INSERT Rekenserver.resultaat (dienstverband_id, periode_id, versie, vraag_id, dialog_handle, waarschuwingen)
            VALUES (@dv, @periode, @versie, @vraag, @handle, @waarschuwingen);
        IF EXISTS (SELECT 1 FROM Rekenserver.resultaat
                    WHERE dienstverband_id = @dv AND periode_id = @periode AND versie = @versie AND dialog_handle = @handle)
        BEGIN
            SET @uitkomst = 'opgeslagen';
            DELETE Rekenserver.resultaat_factor WHERE dienstverband_id = @dv AND periode_id = @periode;
            INSERT Rekenserver.resultaat_factor (dienstverband_id, periode_id, kaart_soort, loonfactor_code, waarde)
            SELECT @dv, @periode, kaart_soort, loonfactor_code, waarde FROM @nieuw;
            -- The version it replaces is stamped: the retention counts from then.
            UPDATE Rekenserver.resultaat_historie SET vervangen_op = SYSUTCDATETIME()
             WHERE dienstverband_id = @dv AND periode_id = @periode AND vervangen_op IS NULL;
            INSERT Rekenserver.resultaat_historie (dienstverband_id, periode_id, versie, vraag, factoren, rekenversie)
            VALUES (@dv, @periode, @versie,
                    (SELECT l.vraag FROM Rekenserver.berekening_log l
                      WHERE l.dialog_handle = @handle AND l.vraag_id = @vraag),
                    (SELECT n.loonfactor_code AS c, CONVERT(varchar(40), n.waarde) AS w FROM @nieuw n
                      ORDER BY n.loonfactor_code FOR JSON PATH),
                    @rekenversie);
        END
        ELSE
            SET @uitkomst = 'verouderd';
    END
    -- The Vraag kept for the evidence leaves the log with the outcome (copied above when
    -- the result was stored): the log keeps no salary data of its own.
    UPDATE Rekenserver.berekening_log SET beantwoord_op = SYSUTCDATETIME(), uitkomst = @uitkomst, vraag = NULL
     WHERE dialog_handle = @handle AND vraag_id = @vraag;
    -- A reused dialog with no request left open: its idle timer starts (again; BEGIN
    -- CONVERSATION TIMER on a running timer sets it to the new timeout). The DialogTimer
    -- comes to this side's queue only, and the collector ends the dialog if the key is
    -- still idle then (Rekenserver.dialoog_stil). A dialog the target has ended (state
    -- DI) is not timed: its EndDialog or Error is on its way.
    IF Rekenserver.sleuteldialoog_staat(@handle) = 'CO'
       AND NOT EXISTS (SELECT 1 FROM Rekenserver.berekening_log WHERE dialog_handle = @handle AND uitkomst IS NULL)
    BEGIN
        -- (Reuse turned off since: the dialog still ends, after a second.)
        SET @stil = Rekenserver.dialoog_hergebruik();
        IF @stil < 1 SET @stil = 1;
        BEGIN CONVERSATION TIMER (@handle) TIMEOUT = @stil;
    END;
    SET @uitkomst_uit = @uitkomst;
    IF @zonder_resultaat = 0
        SELECT @uitkomst AS uitkomst;
END;
GO

-- Rekenserver.noteer_fout and Rekenserver.dialoog_stil below read the key's reused dialog
-- (Rekenserver.sleutel, 04_roster.sql). On an install from before conversation reuse the
-- table is there without its columns, and a procedure naming a column a table does not
-- have is refused at CREATE (deferred name resolution covers missing tables only): the
-- columns are added here first. (On a new install the table does not exist yet: 04_roster.sql
-- makes it, and adds them as it does to an older one.)
IF OBJECT_ID(N'Rekenserver.sleutel', N'U') IS NOT NULL AND COL_LENGTH(N'Rekenserver.sleutel', N'dialog_handle') IS NULL
    ALTER TABLE Rekenserver.sleutel ADD dialog_handle uniqueidentifier NULL;
GO
IF OBJECT_ID(N'Rekenserver.sleutel', N'U') IS NOT NULL AND COL_LENGTH(N'Rekenserver.sleutel', N'dialog_verloopt') IS NULL
    ALTER TABLE Rekenserver.sleutel ADD dialog_verloopt datetime2(3) NULL;
GO

-- Records why a dialog got no answer (a Fout's reason, an error end), and whether
-- sending the same version again can succeed (@herstelbaar: the environment's fault).
-- The first record of a request stands. A caller of an older release passes no
-- @herstelbaar: it is then read from the text, in the formats those releases wrote.
-- With @eerste = 1 (a Fout, which answers one request): the oldest request still open on
-- the dialog gets it (a dialog's messages come in order). Should requests have been sent
-- after it on the same dialog (not with SQL Server's rule for reuse, Rekenserver.stuur_vraag,
-- which sends on a dialog with no request open; kept for the rule being loosened), they are
-- lost with the dialog, which the calculation ends with the Fout's error: they are
-- recorded as the environment's, and their key's current version is sent again at once,
-- on a new dialog.
-- Every caller ends the dialog next. When it is its key's reused dialog, it stops being
-- the key's first, under the key's row lock (as Rekenserver.dialoog_stil does), so that a
-- planner never sends on a dialog being ended: the planner reuses a dialog only while
-- holding that row. The collector holds the key's conversation group, which a planner
-- holding the row waits for (SEND and BEGIN DIALOG lock it): should the two deadlock,
-- this transaction is the victim (DEADLOCK_PRIORITY LOW: the worker takes it again, not
-- counted), not the planner's edit, unless the planner's session runs at LOW too (equal
-- priorities: the cheaper to roll back is chosen, SET DEADLOCK_PRIORITY). (Restored on
-- return, as every SET in a procedure.) With reuse on, the row is always taken: a read
-- without a lock could see a planner's new dialog that its rollback then takes back,
-- leaving this dialog the key's while it is ended.
CREATE OR ALTER PROCEDURE Rekenserver.noteer_fout @handle uniqueidentifier, @melding nvarchar(3000),
    @herstelbaar bit = NULL, @eerste bit = 0
AS
BEGIN
    SET NOCOUNT ON; SET XACT_ABORT ON;
    IF @herstelbaar IS NULL
        SET @herstelbaar = CASE WHEN @melding LIKE N'internal (%' OR @melding LIKE N'newer-contract (%'
                                      OR @melding LIKE N'error %' THEN 1 ELSE 0 END;
    DECLARE @vraag uniqueidentifier, @dv int, @periode int;
    SELECT TOP (1) @dv = dienstverband_id, @periode = periode_id
      FROM Rekenserver.berekening_log WHERE dialog_handle = @handle;
    -- (With reuse off, read without a lock first: a dialog named from before it was turned
    -- off takes the row; planners write no dialog then.)
    IF @dv IS NOT NULL AND (Rekenserver.dialoog_hergebruik() > 0
                            OR EXISTS (SELECT 1 FROM Rekenserver.sleutel WITH (NOLOCK)
                                        WHERE dienstverband_id = @dv AND periode_id = @periode
                                          AND dialog_handle = @handle))
    BEGIN
        SET DEADLOCK_PRIORITY LOW;
        UPDATE Rekenserver.sleutel SET dialog_handle = NULL
         WHERE dienstverband_id = @dv AND periode_id = @periode AND dialog_handle = @handle;
    END;
    IF @eerste = 1
    BEGIN
        SELECT TOP (1) @vraag = vraag_id, @dv = dienstverband_id, @periode = periode_id
          FROM Rekenserver.berekening_log
         WHERE dialog_handle = @handle AND uitkomst IS NULL
         ORDER BY versie, verzonden_op;
        IF @vraag IS NOT NULL
        BEGIN
            UPDATE Rekenserver.berekening_log
               SET beantwoord_op = SYSUTCDATETIME(), uitkomst = 'fout', vraag = NULL, foutmelding = @melding,
                   herstelbaar = @herstelbaar
             WHERE dialog_handle = @handle AND vraag_id = @vraag;
            UPDATE Rekenserver.berekening_log
               SET beantwoord_op = SYSUTCDATETIME(), uitkomst = 'fout', vraag = NULL, herstelbaar = 1,
                   foutmelding = N'lost: the dialog ended with the Fout of an earlier request on it; sent again'
             WHERE dialog_handle = @handle AND uitkomst IS NULL;
            IF @@ROWCOUNT > 0
            BEGIN
                -- On a new dialog (this one is no longer the key's: above). The key's row
                -- is taken here if not above, at the same low deadlock priority.
                -- (Rekenserver.stuur_vraag is made by 04_roster.sql, after this: an EXEC of
                -- a procedure not there yet is created with a warning, Msg 2007, and
                -- resolved when it runs.)
                SET DEADLOCK_PRIORITY LOW;
                EXEC Rekenserver.stuur_vraag @dv = @dv, @periode = @periode;
            END;
            RETURN;
        END;
    END;
    UPDATE Rekenserver.berekening_log
       SET beantwoord_op = ISNULL(beantwoord_op, SYSUTCDATETIME()), uitkomst = 'fout',
           foutmelding = ISNULL(foutmelding, @melding), herstelbaar = ISNULL(herstelbaar, @herstelbaar),
           vraag = NULL   -- the evidence's copy of the Vraag is kept for stored results only
     WHERE dialog_handle = @handle AND (uitkomst IS NULL OR uitkomst = 'fout');
END;
GO

-- A reused dialog's idle timer has fired (the collector received its DialogTimer): one
-- row, stil = 1 when no request of the key is open on it (the dialog is then no longer
-- the key's, and the collector ends it), 0 when one is (its answer starts the timer
-- again). Decided under the key's row lock, which Rekenserver.stuur_vraag holds while it
-- chooses the dialog and sends, so that a request is never sent on a dialog being ended.
-- That lock is not waited for: the collector holds the key's conversation group, which a
-- planner holding the row waits for (SEND and BEGIN DIALOG lock it), so waiting could
-- deadlock with the planner's edit. A row a planner holds counts as busy: stil = 0, and
-- the timer starts again (the planner may send on another dialog), unless the dialog is
-- no longer open on both sides (its EndDialog or Error is on its way, and ends it).
-- Whether the dialog was idle (and so ended), as a result set, or with @zonder_resultaat
-- = 1 only in @stil_uit (as Rekenserver.sla_antwoord_op).
CREATE OR ALTER PROCEDURE Rekenserver.dialoog_stil @handle uniqueidentifier,
    @stil_uit bit = NULL OUTPUT, @zonder_resultaat bit = 0
AS
BEGIN
    SET NOCOUNT ON; SET XACT_ABORT ON;
    -- READPAST skips a row's lock, not a page's or the table's (Table Hints): a planner's
    -- edit whose locks escalated is waited for, and it may be waiting for this
    -- transaction's group. This transaction is then the deadlock's victim (taken again
    -- by the worker, not counted), as in Rekenserver.noteer_fout.
    SET DEADLOCK_PRIORITY LOW;
    -- READPAST is for READ COMMITTED and REPEATABLE READ, and with READ_COMMITTED_SNAPSHOT
    -- on it needs READCOMMITTEDLOCK (Table Hints): the caller's level again on return.
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    DECLARE @dv int, @periode int, @stil bit = 1, @idle int;
    SELECT TOP (1) @dv = dienstverband_id, @periode = periode_id
      FROM Rekenserver.berekening_log WHERE dialog_handle = @handle;
    -- (No log row: a dialog no key's row names, a replay whose Vraag could not be read, say.
    -- It is ended; no planner can send on it.)
    IF @dv IS NOT NULL
    BEGIN
        IF NOT EXISTS (SELECT 1 FROM Rekenserver.sleutel WITH (UPDLOCK, ROWLOCK, READPAST, READCOMMITTEDLOCK)
                        WHERE dienstverband_id = @dv AND periode_id = @periode)
           AND EXISTS (SELECT 1 FROM Rekenserver.sleutel WITH (NOLOCK)
                        WHERE dienstverband_id = @dv AND periode_id = @periode)
        BEGIN
            SET @stil = 0;
            SET @idle = Rekenserver.dialoog_hergebruik();
            IF @idle < 1 SET @idle = 1;
            IF Rekenserver.sleuteldialoog_staat(@handle) = 'CO'
            BEGIN
                BEGIN CONVERSATION TIMER (@handle) TIMEOUT = @idle;
            END
        END
        ELSE IF EXISTS (SELECT 1 FROM Rekenserver.berekening_log WHERE dialog_handle = @handle AND uitkomst IS NULL)
            SET @stil = 0;
        ELSE
            UPDATE Rekenserver.sleutel SET dialog_handle = NULL
             WHERE dienstverband_id = @dv AND periode_id = @periode AND dialog_handle = @handle;
    END;
    SET @stil_uit = @stil;
    IF @zonder_resultaat = 0
        SELECT @stil AS stil;
END;
GO

-- Optional, for shops that want the collector inside the database: an internal
-- activation procedure for the answers' queue doing what the Rust collector does, by
-- the worker's rules: a message that fails is rolled back and tried again; a transient
-- failure (deadlock 1205, lock timeout 1222) is not counted; a message that has failed
-- three counted times is, when it is received again, set aside in sbworker.dead_letter
-- before it is handled, in the transaction that holds its group (Handling Transact-SQL
-- Errors: hold the group's lock to change a message's state), the calculation log says
-- why, and its conversation is ended with error 50901. The queue is never disabled
-- (poison-message handling is off on it, 01_service_broker.sql). A failure that ends
-- the task before its CATCH runs (a KILL, severity 20 and up) is not counted: the Rust
-- collector, which counts on a connection of its own before handling, has no such gap.
-- Not activated by this script; to use it instead of sbworker's collector:
--   ALTER QUEUE dbo.loonfactorberekening_data WITH ACTIVATION (STATUS = ON,
--     PROCEDURE_NAME = Rekenserver.antwoorden_activatie, MAX_QUEUE_READERS = 2, EXECUTE AS OWNER);
-- Back to sbworker's collector: ACTIVATION (STATUS = OFF), and MAX_QUEUE_READERS = 0 (or
-- ACTIVATION (DROP)) unless the workers' readers should stay limited to it: sbworker
-- honours the queue's MAX_QUEUE_READERS across every worker.
CREATE OR ALTER PROCEDURE Rekenserver.antwoorden_activatie
AS
BEGIN
    SET NOCOUNT ON; SET XACT_ABORT ON;
    SET ANSI_PADDING ON; SET ANSI_WARNINGS ON; SET ARITHABORT ON; SET CONCAT_NULL_YIELDS_NULL ON;
    SET NUMERIC_ROUNDABORT OFF;
    DECLARE @handle uniqueidentifier, @seq bigint, @group uniqueidentifier, @type sysname, @body varbinary(max),
            @service nvarchar(512), @contract nvarchar(256), @tekst nvarchar(3000), @fout nvarchar(3000),
            @nummer int, @pogingen int, @max_pogingen int = 3, @reden nvarchar(40), @herstelbaar bit,
            @opzij bit;
    DECLARE @uit varchar(10);
    DECLARE @sleutel nvarchar(200), @antwoord xml;
    DECLARE @stil bit;
    DECLARE @telling TABLE (h uniqueidentifier, s bigint, attempts int, last_error nvarchar(3000), failures int,
                            transient_failures int);
    WHILE 1 = 1
    BEGIN
        SELECT @handle = NULL, @opzij = 0;
        BEGIN TRY
            BEGIN TRANSACTION;
            WAITFOR (RECEIVE TOP (1) @handle = conversation_handle, @seq = message_sequence_number,
                                     @group = conversation_group_id, @type = message_type_name, @body = message_body,
                                     @service = service_name, @contract = service_contract_name
                       FROM dbo.loonfactorberekening_data), TIMEOUT 1000;
            IF @handle IS NULL
            BEGIN
                ROLLBACK TRANSACTION;
                BREAK;
            END
            SELECT @pogingen = attempts, @fout = last_error FROM sbworker.message_attempt
             WHERE conversation_handle = @handle AND message_sequence_number = @seq;
            IF @@ROWCOUNT = 0 SELECT @pogingen = 0, @fout = NULL;
            IF @pogingen >= @max_pogingen
            BEGIN
                -- Failed too often: set aside, not handled, while this transaction holds
                -- the group. (A failure here is raised from CATCH: counting it would bring
                -- the same message back at once, for ever.)
                SET @opzij = 1;
                SET @tekst = LEFT(CONCAT(N'internal (50901): diverted after ', @pogingen, N' failed attempts: ', @fout),
                                  3000);
                EXEC sbworker.set_aside @queue = N'dbo.loonfactorberekening_data', @service = @service,
                     @contract = @contract, @group = @group, @handle = @handle, @seq = @seq, @type = @type,
                     @body = @body, @attempts = @pogingen, @reason = @tekst;
                EXEC Rekenserver.noteer_fout @handle = @handle, @melding = @tekst, @herstelbaar = 1;
                DELETE sbworker.message_attempt WHERE conversation_handle = @handle AND message_sequence_number = @seq;
                END CONVERSATION @handle WITH ERROR = 50901 DESCRIPTION = @tekst;
                COMMIT TRANSACTION;
                CONTINUE;
            END
            -- A dialog's Error is received before its other messages, whatever order they
            -- were sent in ("Broker System Messages"): the Fout the calculation sends just
            -- before it ends the dialog with that Fout's error waits behind the Error. That
            -- Fout is the outcome (the request's own fault), handled as a Fout below; its
            -- END discards it with the Error's conversation. Not when an Antwoord waits
            -- before it (a reused dialog: END would drop that answer, and the Fout would go
            -- to its request, the oldest open): then the Error is recorded for every open
            -- request as the environment's, and the sweep sends them again (the Fout comes
            -- back then, and is recorded as such).
            -- (NOLOCK, as "Querying Queues" advises: a SELECT on a queue may block its readers.
            -- The Fout was committed with the Error, and this transaction holds the group;
            -- status 0, ready, in case the calculation were ever on another instance: a
            -- message not yet complete is not taken for it, CREATE QUEUE's columns.)
            IF @type = N'http://schemas.microsoft.com/SQL/ServiceBroker/Error'
                SELECT TOP (1) @type = f.message_type_name, @body = f.message_body
                  FROM dbo.loonfactorberekening_data AS f WITH (NOLOCK)
                 WHERE f.conversation_handle = @handle AND f.message_type_name = N'/Rekenserver/Fout' AND f.status = 0
                   AND NOT EXISTS (SELECT 1 FROM dbo.loonfactorberekening_data AS a WITH (NOLOCK)
                                    WHERE a.conversation_handle = @handle
                                      AND a.message_type_name = N'/Rekenserver/LoonfactorBerekening/Antwoord'
                                      AND a.message_sequence_number < f.message_sequence_number)
                 ORDER BY f.message_sequence_number;
            IF @type = N'/Rekenserver/LoonfactorBerekening/Antwoord'
            BEGIN
                SET @antwoord = CAST(@body AS xml);   -- explicit: a malformed body fails here, in the TRY
                EXEC Rekenserver.sla_antwoord_op @handle = @handle, @antwoord = @antwoord,
                    @uitkomst_uit = @uit OUTPUT, @zonder_resultaat = 1;
                -- A reused dialog stays open for the key's next versions (its idle timer ends it).
                IF @contract <> N'/Rekenserver/LoonfactorBerekening/SleutelContract'
                    END CONVERSATION @handle;
            END
            ELSE IF @type = N'/Rekenserver/Fout'
            BEGIN
                -- The Rust collector's text, "reden (number): message"; an internal Fout
                -- (a diversion) or a newer-contract one (a worker older than the Vraag) is
                -- the environment's fault, any other is the request's.
                -- A Fout that cannot be read (its elements missing or not numbers) is
                -- recorded as such, as the Rust collector does (not the environment's
                -- fault), not retried. The body is well-formed (WELL_FORMED_XML).
                SET @antwoord = CAST(@body AS xml);
                WITH XMLNAMESPACES (DEFAULT 'http://www.sdbgroep.nl/MPlus/Rekenserver/2008')
                SELECT @reden = @antwoord.value('(/RekenserverFout/Reden)[1]', 'nvarchar(40)'),
                       @nummer = TRY_CONVERT(int, @antwoord.value('(/RekenserverFout/ErrorNumber)[1]', 'nvarchar(40)')),
                       @tekst = @antwoord.value('(/RekenserverFout/ErrorMessage)[1]', 'nvarchar(3000)');
                IF @reden IS NULL OR @nummer IS NULL OR @tekst IS NULL
                    SELECT @tekst = N'unreadable Fout: not a RekenserverFout with Reden, ErrorNumber and ErrorMessage',
                           @herstelbaar = 0;
                ELSE
                    SELECT @tekst = LEFT(CONCAT(@reden, N' (', @nummer, N'): ', @tekst), 3000),
                           @herstelbaar = CASE WHEN @reden IN (N'internal', N'newer-contract') THEN 1 ELSE 0 END;
                -- A Fout answers the oldest request open on the dialog (a reused one carries several).
                EXEC Rekenserver.noteer_fout @handle = @handle, @melding = @tekst, @herstelbaar = @herstelbaar,
                     @eerste = 1;
                END CONVERSATION @handle;
            END
            ELSE IF @type = N'http://schemas.microsoft.com/SQL/ServiceBroker/Error'
            BEGIN
                -- "error code: description", as the Rust collector writes it; an error end
                -- (a diversion, an expired LIFETIME, a broker error) is the environment's.
                SET @antwoord = CAST(@body AS xml);
                WITH XMLNAMESPACES (DEFAULT 'http://schemas.microsoft.com/SQL/ServiceBroker/Error')
                SELECT @nummer = @antwoord.value('(/Error/Code)[1]', 'int'),
                       @tekst = @antwoord.value('(/Error/Description)[1]', 'nvarchar(3000)');
                SET @tekst = LEFT(CONCAT(N'error ', @nummer, N': ', @tekst), 3000);   -- EXEC takes a variable, not an expression
                EXEC Rekenserver.noteer_fout @handle = @handle, @melding = @tekst, @herstelbaar = 1;
                END CONVERSATION @handle;
            END
            ELSE IF @type = N'http://schemas.microsoft.com/SQL/ServiceBroker/EndDialog'
                END CONVERSATION @handle;
            ELSE IF @type = N'http://schemas.microsoft.com/SQL/ServiceBroker/DialogTimer'
            BEGIN
                -- A reused dialog's idle timer: ended when the key is still idle.
                IF @contract = N'/Rekenserver/LoonfactorBerekening/SleutelContract'
                BEGIN
                    SET @stil = 0;
                    EXEC Rekenserver.dialoog_stil @handle = @handle, @stil_uit = @stil OUTPUT, @zonder_resultaat = 1;
                    IF @stil = 1
                    BEGIN
                        END CONVERSATION @handle;
                    END
                END
            END
            ELSE
            BEGIN
                -- Outside the contract: ended with an error, as the Rust collector does.
                SET @tekst = CONCAT(N'message type ', @type, N' is not part of the calculation contract');
                EXEC Rekenserver.noteer_fout @handle = @handle, @melding = @tekst, @herstelbaar = 0, @eerste = 1;
                END CONVERSATION @handle WITH ERROR = 50900 DESCRIPTION = @tekst;
            END
            DELETE sbworker.message_attempt WHERE conversation_handle = @handle AND message_sequence_number = @seq;
            COMMIT TRANSACTION;
        END TRY
        BEGIN CATCH
            -- Not raised again: the failure is handled here by the worker's rules (the
            -- message goes back to the queue and is counted; once it has failed three
            -- times, the next receive sets it aside), and raising it would end the
            -- activated task with the message still failing.
            SELECT @nummer = ERROR_NUMBER(),
                   @fout = CONVERT(nvarchar(3000), CONCAT(N'error ', ERROR_NUMBER(), N': ', ERROR_MESSAGE()));
            IF XACT_STATE() <> 0 ROLLBACK TRANSACTION;
            IF @handle IS NULL OR @opzij = 1
                THROW;   -- the RECEIVE or the set-aside failed: the task ends, activation starts it again
            IF @nummer IN (1205, 1222)
                WAITFOR DELAY '00:00:00.200';   -- the environment's fault: not counted
            ELSE
            BEGIN
                -- Counted. Should counting fail too (the database is in trouble), its error
                -- leaves this CATCH and ends the task; activation starts it again.
                SET @sleutel = CONCAT(N'[{"h":"', @handle, N'","s":', @seq, N'}]');
                DELETE @telling;
                INSERT @telling EXEC sbworker.count_attempts @queue = N'dbo.loonfactorberekening_data', @keys = @sleutel;
                EXEC sbworker.note_failure @keys = @sleutel, @error = @fout, @transient = 0;
            END
        END CATCH
    END
END;
GO

-- The evidence of a key's stored versions (`sbworker explain --mssql`), oldest first:
-- each version's Vraag as sent (DECOMPRESSed to its text), its factors (the JSON array
-- written above), what computed it, and when it was stored and exported.
CREATE OR ALTER PROCEDURE Rekenserver.bewijs @dv int, @periode int
AS
BEGIN
    SET NOCOUNT ON;
    SET CONCAT_NULL_YIELDS_NULL ON;   -- a NULL time + N'Z' stays NULL (OFF is possible on 2016)
    -- UTC, marked so (as status_report writes it); NULL stays NULL.
    SELECT h.versie, CONVERT(nvarchar(33), h.opgeslagen_op, 126) + N'Z' AS opgeslagen_op,
           CAST(DECOMPRESS(h.vraag) AS nvarchar(max)) AS vraag, h.factoren, h.rekenversie,
           CONVERT(nvarchar(33), h.geexporteerd_op, 126) + N'Z' AS geexporteerd_op
      FROM Rekenserver.resultaat_historie h
     WHERE h.dienstverband_id = @dv AND h.periode_id = @periode
     ORDER BY h.versie, h.id;
END;
GO

SET NOEXEC OFF;
GO
