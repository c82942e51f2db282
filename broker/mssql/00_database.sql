-- sbworker on SQL Server, script 00: the database and its schemas.
-- Run with sqlcmd, in order 00..06 (see README, "SQL Server: deployment"):
--   sqlcmd -S server -d master -i 00_database.sql -v Database=Payroll WorkerLogin=sbworker WorkerUser=sbworker
-- Idempotent: every batch checks before it creates. The login ($(WorkerLogin), SQL
-- authentication) is the DBA's to create; this script maps a user and a role to it.

:setvar Database Payroll
:setvar WorkerLogin sbworker
:setvar WorkerUser sbworker
:on error exit

IF NOT EXISTS (SELECT 1 FROM sys.databases WHERE name = N'$(Database)' AND is_broker_enabled = 1)
    ALTER DATABASE [$(Database)] SET ENABLE_BROKER WITH ROLLBACK IMMEDIATE;
GO

USE [$(Database)];
GO

IF SCHEMA_ID(N'Rekenserver') IS NULL EXEC (N'CREATE SCHEMA Rekenserver AUTHORIZATION dbo');
GO
IF SCHEMA_ID(N'sbworker') IS NULL EXEC (N'CREATE SCHEMA sbworker AUTHORIZATION dbo');
GO
IF SCHEMA_ID(N'Rooster') IS NULL EXEC (N'CREATE SCHEMA Rooster AUTHORIZATION dbo');
GO

-- The worker's user and role: no db_owner, no TRUSTWORTHY, no CLR. 06_security.sql grants
-- the role exactly what the worker uses.
IF USER_ID(N'$(WorkerUser)') IS NULL CREATE USER [$(WorkerUser)] FOR LOGIN [$(WorkerLogin)];
GO
IF DATABASE_PRINCIPAL_ID(N'sbworker_role') IS NULL CREATE ROLE sbworker_role AUTHORIZATION dbo;
GO
IF IS_ROLEMEMBER(N'sbworker_role', N'$(WorkerUser)') = 0 ALTER ROLE sbworker_role ADD MEMBER [$(WorkerUser)];
GO
