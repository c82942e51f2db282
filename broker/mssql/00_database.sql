-- sbworker on SQL Server, script 00: the database and its schemas.
-- Run every broker/mssql/NN_*.sql in the order of its number with sqlcmd (docs/deployment.md), every variable given:
--   sqlcmd -S server -d master -I -b -i 00_database.sql -v Database=Payroll WorkerLogin=sbworker WorkerUser=sbworker
-- (01 to 07 take Side=both, roster or calc too; this script is the same on every side).
-- or with `sbworker install --mssql`. No variable has a default: one not given stops
-- the script before it touches anything. Idempotent: every batch checks before it
-- creates. The database and the worker's login (SQL authentication) are the DBA's to
-- create; this script checks them, enables the broker, and maps a user and a role.

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

-- Before anything changes: the installer's rights, the database, its owner, its
-- compatibility level and its broker id are checked, and each problem is named with
-- what to do about it. The checks read server-level catalog rows (sys.databases of
-- other databases, sys.server_principals), which only a login with VIEW ANY DATABASE
-- and VIEW ANY DEFINITION sees (a sysadmin has both): without them a check could pass
-- or fail for the wrong reason, so the script stops first.
IF HAS_PERMS_BY_NAME(NULL, NULL, N'VIEW ANY DATABASE') = 0 OR HAS_PERMS_BY_NAME(NULL, NULL, N'VIEW ANY DEFINITION') = 0
    BEGIN
        DECLARE @m50028 nvarchar(2048) = REPLACE(N'Run the install as a DBA: its checks need VIEW ANY DATABASE and VIEW ANY DEFINITION (a sysadmin has both), and it needs ALTER on database $(Database) and ALTER ANY USER in it.', N'%', N'%%');   -- THROW reserves %
        THROW 50028, @m50028, 1;
    END
GO
IF DB_ID(N'$(Database)') IS NULL
    BEGIN
        DECLARE @m50020 nvarchar(2048) = REPLACE(N'Database $(Database) does not exist: create it first (CREATE DATABASE), then run 00_database.sql again.', N'%', N'%%');   -- THROW reserves %
        THROW 50020, @m50020, 1;
    END
GO
IF SUSER_ID(N'$(WorkerLogin)') IS NULL
    BEGIN
        DECLARE @m50021 nvarchar(2048) = REPLACE(N'Login $(WorkerLogin) does not exist: create it first (CREATE LOGIN ... WITH PASSWORD = ...), then run 00_database.sql again.', N'%', N'%%');   -- THROW reserves %
        THROW 50021, @m50021, 1;
    END
GO
-- CREATE OR ALTER needs SQL Server 2016 SP1 (13.0.4001) or later. (Azure SQL Managed
-- Instance, engine edition 8, reports a version of its own and has it.)
IF CAST(SERVERPROPERTY('EngineEdition') AS int) <> 8
   AND (CAST(PARSENAME(CONVERT(varchar(32), SERVERPROPERTY('ProductVersion')), 4) AS int) < 13
        OR (CAST(PARSENAME(CONVERT(varchar(32), SERVERPROPERTY('ProductVersion')), 4) AS int) = 13
            AND CAST(PARSENAME(CONVERT(varchar(32), SERVERPROPERTY('ProductVersion')), 2) AS int) < 4001))
    THROW 50026, N'sbworker needs SQL Server 2016 SP1 (13.0.4001) or later: the scripts use CREATE OR ALTER.', 1;
GO
-- OPENJSON (the worker's key lists, the roster triggers) needs compatibility level 130.
IF NOT EXISTS (SELECT 1 FROM sys.databases WHERE name = N'$(Database)' AND compatibility_level >= 130)
    BEGIN
        DECLARE @m50022 nvarchar(2048) = REPLACE(N'Database $(Database) has a compatibility level below 130 (SQL Server 2016), which OPENJSON needs: ALTER DATABASE [$(Database)] SET COMPATIBILITY_LEVEL = 130 (or higher) after checking the application with it.', N'%', N'%%');   -- THROW reserves %
        THROW 50022, @m50022, 1;
    END
GO
-- A restored database whose owner has no login on this instance: EXECUTE AS OWNER
-- (sbworker.queue_state, activation) fails with Msg 15517. (sys.server_principals,
-- not SUSER_SNAME, which also names a Windows account that has no login.)
IF EXISTS (SELECT 1 FROM sys.databases d
            WHERE d.name = N'$(Database)'
              AND NOT EXISTS (SELECT 1 FROM sys.server_principals p WHERE p.sid = d.owner_sid))
    BEGIN
        DECLARE @m50023 nvarchar(2048) = REPLACE(N'The owner of database $(Database) has no login on this instance (a restored copy?): EXECUTE AS OWNER would fail with Msg 15517. Give it an owner: ALTER AUTHORIZATION ON DATABASE::[$(Database)] TO [a login, e.g. sa].', N'%', N'%%');   -- THROW reserves %
        THROW 50023, @m50023, 1;
    END
GO
-- A restored copy whose broker id another database on this instance has enabled
-- cannot enable its broker (Msg 9772).
-- (Not on Azure SQL Managed Instance, engine edition 8: it cannot change NEW_BROKER or
-- ENABLE_BROKER at all; 50030 below says what to do there.)
IF CAST(SERVERPROPERTY('EngineEdition') AS int) <> 8
   AND EXISTS (SELECT 1 FROM sys.databases d
            WHERE d.name = N'$(Database)' AND d.is_broker_enabled = 0
              AND EXISTS (SELECT 1 FROM sys.databases o
                           WHERE o.service_broker_guid = d.service_broker_guid AND o.database_id <> d.database_id
                             AND o.is_broker_enabled = 1))
    BEGIN
        DECLARE @m50024 nvarchar(2048) = REPLACE(N'The Service Broker id of database $(Database) is already enabled in another database on this instance (a restored copy?), so ENABLE_BROKER would fail with Msg 9772. Give it a new id, which ends its existing conversations: ALTER DATABASE [$(Database)] SET NEW_BROKER WITH ROLLBACK IMMEDIATE; then run 00_database.sql again, and EXEC Rekenserver.markeer_verloren in it (the sweep does so too), so the requests cut off are sent again.', N'%', N'%%');   -- THROW reserves %
        THROW 50024, @m50024, 1;
    END
GO

USE [$(Database)];
GO

-- Restored by someone else: dbo inside the database (whom EXECUTE AS OWNER
-- impersonates) is not the owner the instance records, or has no login (Msg 15517).
IF EXISTS (SELECT 1 FROM sys.database_principals dp
             JOIN sys.databases d ON d.database_id = DB_ID()
            WHERE dp.principal_id = 1
              AND (dp.sid <> d.owner_sid OR NOT EXISTS (SELECT 1 FROM sys.server_principals p WHERE p.sid = dp.sid)))
    BEGIN
        DECLARE @m50027 nvarchar(2048) = REPLACE(N'dbo of database $(Database) does not map to its owner login (restored by someone else?): EXECUTE AS OWNER would fail with Msg 15517. Run ALTER AUTHORIZATION ON DATABASE::[$(Database)] TO [a login, e.g. sa], then run 00_database.sql again.', N'%', N'%%');   -- THROW reserves %
        THROW 50027, @m50027, 1;
    END
GO
-- A principal of the worker user's name that is not a SQL user, or a user that maps to
-- another existing login: not ours to change.
IF EXISTS (SELECT 1 FROM sys.database_principals u
            WHERE u.name = N'$(WorkerUser)'
              AND (u.type <> 'S' OR u.authentication_type <> 1
                   OR (u.sid <> (SELECT sp.sid FROM sys.server_principals sp WHERE sp.name = N'$(WorkerLogin)')
                       AND EXISTS (SELECT 1 FROM sys.server_principals p WHERE p.sid = u.sid))))
    BEGIN
        DECLARE @m50029 nvarchar(2048) = REPLACE(N'Database $(Database) already has a principal named $(WorkerUser) that is not a user of login $(WorkerLogin) (another login''s user, a role, or a user without a login): choose another WorkerUser, or remove it.', N'%', N'%%');   -- THROW reserves %
        THROW 50029, @m50029, 1;
    END
GO
-- The worker's login already has a user here under another name: CREATE USER would
-- fail halfway (Msg 15063, "The login already has an account under a different user
-- name"), after the broker was enabled.
IF EXISTS (SELECT 1 FROM sys.database_principals u
            WHERE u.sid = (SELECT sp.sid FROM sys.server_principals sp WHERE sp.name = N'$(WorkerLogin)')
              AND u.name <> N'$(WorkerUser)')
    BEGIN
        DECLARE @m50031 nvarchar(2048) = REPLACE(N'Login $(WorkerLogin) already has a user in database $(Database) under another name than $(WorkerUser): give that name as WorkerUser, or drop that user first.', N'%', N'%%');   -- THROW reserves %
        THROW 50031, @m50031, 1;
    END
GO

USE master;
GO

-- Azure SQL Managed Instance has the broker on in every database and cannot change it
-- (ENABLE_BROKER, DISABLE_BROKER and NEW_BROKER are not supported there): a database
-- with it off (a copy restored beside its original) cannot be fixed by a script.
IF CAST(SERVERPROPERTY('EngineEdition') AS int) = 8
   AND EXISTS (SELECT 1 FROM sys.databases WHERE name = N'$(Database)' AND is_broker_enabled = 0)
BEGIN
    DECLARE @m50030 nvarchar(2048) = REPLACE(N'Service Broker is off in database $(Database) on this Managed Instance, which cannot turn it on (ENABLE_BROKER and NEW_BROKER are not supported there). Restore the database as a copy with its own broker id (a point-in-time restore under another name, not beside a database that has the same id enabled), or ask Azure support.', N'%', N'%%');   -- THROW reserves %
    THROW 50030, @m50030, 1;
END
GO
-- Enabling the broker needs the database to itself: NO_WAIT fails at once rather than
-- ending other sessions' work (ROLLBACK IMMEDIATE would); the message says what to do.
IF CAST(SERVERPROPERTY('EngineEdition') AS int) <> 8
   AND NOT EXISTS (SELECT 1 FROM sys.databases WHERE name = N'$(Database)' AND is_broker_enabled = 1)
BEGIN
    BEGIN TRY
        ALTER DATABASE [$(Database)] SET ENABLE_BROKER WITH NO_WAIT;
    END TRY
    BEGIN CATCH
        -- Raised again, with what to do: the script must stop here. THROW reserves %,
        -- so it is doubled (within the message's 2,048 characters).
        DECLARE @m nvarchar(2048) = REPLACE(LEFT(CONCAT(N'Service Broker could not be enabled in $(Database) (Msg ',
            ERROR_NUMBER(), N': ', ERROR_MESSAGE(), N'). It needs the database to itself: run ALTER DATABASE ',
            N'[$(Database)] SET ENABLE_BROKER WITH ROLLBACK IMMEDIATE in a maintenance window (it ends other ',
            N'sessions there), then run 00_database.sql again.'), 1000), N'%', N'%%');
        THROW 50025, @m, 1;
    END CATCH
END
GO

USE [$(Database)];
GO

IF SCHEMA_ID(N'Rekenserver') IS NULL EXEC (N'CREATE SCHEMA Rekenserver AUTHORIZATION dbo');
GO
IF SCHEMA_ID(N'sbworker') IS NULL EXEC (N'CREATE SCHEMA sbworker AUTHORIZATION dbo');
GO
IF SCHEMA_ID(N'Rooster') IS NULL EXEC (N'CREATE SCHEMA Rooster AUTHORIZATION dbo');
GO

-- The worker's user and role: no db_owner, no TRUSTWORTHY, no CLR. 07_security.sql grants
-- the role exactly what the worker uses.
IF DATABASE_PRINCIPAL_ID(N'$(WorkerUser)') IS NULL CREATE USER [$(WorkerUser)] FOR LOGIN [$(WorkerLogin)];
GO
-- An existing SQL user whose login is gone (a restored database, a login made again)
-- is orphaned: EXECUTE AS it (Rekenserver.stuur_vraag, run by the roster triggers)
-- would fail. It is mapped to the login again.
IF EXISTS (SELECT 1 FROM sys.database_principals u
            WHERE u.name = N'$(WorkerUser)' AND u.type = 'S' AND u.sid <> (SELECT sp.sid FROM sys.server_principals sp WHERE sp.name = N'$(WorkerLogin)')
              AND NOT EXISTS (SELECT 1 FROM sys.server_principals p WHERE p.sid = u.sid))
    ALTER USER [$(WorkerUser)] WITH LOGIN = [$(WorkerLogin)];
GO
IF DATABASE_PRINCIPAL_ID(N'sbworker_role') IS NULL CREATE ROLE sbworker_role AUTHORIZATION dbo;
GO
-- The operator's role (`sbworker status`, `sbworker dead-letter`) and the monitor's
-- (`sbworker status` only): 07_security.sql grants them those procedures and nothing
-- else; the DBA adds the operators' and the monitoring system's users to them.
IF DATABASE_PRINCIPAL_ID(N'sbworker_operator_role') IS NULL CREATE ROLE sbworker_operator_role AUTHORIZATION dbo;
GO
IF DATABASE_PRINCIPAL_ID(N'sbworker_monitor_role') IS NULL CREATE ROLE sbworker_monitor_role AUTHORIZATION dbo;
GO
-- One role per job, as on PostgreSQL: the roster's editors (whose triggers send), the
-- payroll export, the housekeeping (sweep, the keys the triggers never saw, status, dead
-- letters). `sbworker install --mssql ... --payroll-role LOGIN` (and the others) adds a
-- login's user to one.
IF DATABASE_PRINCIPAL_ID(N'sbworker_sender_role') IS NULL CREATE ROLE sbworker_sender_role AUTHORIZATION dbo;
GO
IF DATABASE_PRINCIPAL_ID(N'sbworker_payroll_role') IS NULL CREATE ROLE sbworker_payroll_role AUTHORIZATION dbo;
GO
IF DATABASE_PRINCIPAL_ID(N'sbworker_housekeeping_role') IS NULL CREATE ROLE sbworker_housekeeping_role AUTHORIZATION dbo;
GO
-- Membership read from the catalog (IS_ROLEMEMBER can be NULL, which would skip this).
IF NOT EXISTS (SELECT 1 FROM sys.database_role_members rm
                WHERE rm.role_principal_id = DATABASE_PRINCIPAL_ID(N'sbworker_role')
                  AND rm.member_principal_id = DATABASE_PRINCIPAL_ID(N'$(WorkerUser)'))
    ALTER ROLE sbworker_role ADD MEMBER [$(WorkerUser)];
GO
