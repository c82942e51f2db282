-- The statements of `sbworker install --mssql` around the scripts (crates/core/src/broker/mssql/scripts.rs).

-- `--allow-older-workers`: script 04 replaces the senders even while a live worker reads
-- an older Vraag contract (its guard reads this; the session keeps it across USE).
-- name: allow_older_workers
EXEC sp_set_session_context N'sbworker.oudere_workers_toegestaan', 1;

-- The XML schema collection the Vraag's message type validates against, if any (the
-- optional script binds one): the install puts this release's in first where it differs.
-- name: bound_collection
SELECT TOP (1) x.name FROM sys.service_message_types t
  JOIN sys.xml_schema_collections x ON x.xml_collection_id = t.xml_collection_id
 WHERE t.name = N'/Rekenserver/LoonfactorBerekening/Vraag';

-- A login's user in the database, added to one of sbworker's roles: the user the login
-- has there (whatever its name), or a new one named as the login. @P1 the database, @P2
-- the role (one of sbworker's, checked by the caller and again here), @P3 the login.
-- name: grant_role
DECLARE @sql nvarchar(max) = N'USE ' + QUOTENAME(@P1) + N';
IF @role NOT IN (N''sbworker_role'', N''sbworker_sender_role'', N''sbworker_payroll_role'',
                 N''sbworker_housekeeping_role'', N''sbworker_monitor_role'', N''sbworker_operator_role'')
    THROW 50140, N''not one of sbworker''''s roles'', 1;
IF SUSER_ID(@login) IS NULL
    THROW 50141, N''the login does not exist: create it first (CREATE LOGIN)'', 1;
DECLARE @user sysname = (SELECT u.name FROM sys.database_principals u
                           JOIN sys.server_principals l ON l.sid = u.sid WHERE l.name = @login);
DECLARE @ddl nvarchar(max);
IF @user IS NULL
BEGIN
    IF DATABASE_PRINCIPAL_ID(@login) IS NOT NULL
        THROW 50142, N''a user named as the login exists but belongs to no login or another one (orphaned after a restore?): map it with ALTER USER ... WITH LOGIN, or drop it'', 1;
    SET @user = @login;
    SET @ddl = N''CREATE USER '' + QUOTENAME(@user) + N'' FOR LOGIN '' + QUOTENAME(@login) + N'';'';
    EXEC sys.sp_executesql @ddl;
END;
-- The database owner (dbo) may do everything already, and cannot be a role member.
IF @user <> N''dbo'' AND NOT EXISTS (SELECT 1 FROM sys.database_role_members rm
                WHERE rm.role_principal_id = DATABASE_PRINCIPAL_ID(@role)
                  AND rm.member_principal_id = DATABASE_PRINCIPAL_ID(@user))
BEGIN
    SET @ddl = N''ALTER ROLE '' + QUOTENAME(@role) + N'' ADD MEMBER '' + QUOTENAME(@user) + N'';'';
    EXEC sys.sp_executesql @ddl;
END;
SELECT @user AS member_user;';
EXEC sys.sp_executesql @sql, N'@role sysname, @login sysname', @role = @P2, @login = @P3;

-- Which side of a split install the database holds (02_worker.sql); an install from
-- before sides has no such procedure (2812: both).
-- name: side
EXEC sbworker.side
