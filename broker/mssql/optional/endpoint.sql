-- sbworker on SQL Server, optional script for a split deployment (docs/sqlserver.md, "Two
-- databases, two servers"): this instance's Service Broker endpoint with certificate
-- transport security, and the far instance's certificate let in. Runs in master, by a
-- sysadmin, on every instance of the deployment (the roster's, each calculation server,
-- every replica of an availability group), once per far instance; every run changes
-- nothing that is already there. Variables (sqlcmd -v, every one given):
--   Instance            a short name for this instance (letters, digits, _): its
--                       certificate is sbworker_broker_<Instance>
--   Port                the endpoint's TCP port (4022 by custom; the same on every
--                       replica of an availability group)
--   MasterKeyPassword   the password of master's database master key, if this script
--                       makes it (no single quote in it); not read when one exists
--   CertificateExpiry   the expiry date of this instance's certificate (yyyymmdd):
--                       renew it before then (docs/sqlserver.md)
--   CertificateFile     where to write this instance's public certificate (a path on
--                       this server), for the far instance's DBA
--   FarInstance         the far instance's Instance name, or none (its certificate is
--                       not there yet: run again when it is)
--   FarCertificateFile  the far instance's public certificate, copied to this server
--                       (not read with FarInstance=none: give none)
--   WorkerLogin         the worker's login: may see the endpoint's state, for
--                       `sbworker selftest --side`
-- For example, on the roster's instance, then on the calculation's with the names swapped:
--   sqlcmd -S rooster-db -d master -I -b -i broker/mssql/optional/endpoint.sql -v Instance=rooster
--     Port=4022 MasterKeyPassword=... CertificateExpiry=20301231
--     CertificateFile=D:\certs\sbworker_broker_rooster.cer FarInstance=reken1
--     FarCertificateFile=D:\certs\sbworker_broker_reken1.cer WorkerLogin=sbworker
-- Only the public certificate leaves an instance (BACKUP CERTIFICATE without its private
-- key); install certificates from a trusted source only.

:on error exit
SET ANSI_NULLS ON;
SET ANSI_PADDING ON;
SET ANSI_WARNINGS ON;
SET ARITHABORT ON;
SET CONCAT_NULL_YIELDS_NULL ON;
SET QUOTED_IDENTIFIER ON;
SET NUMERIC_ROUNDABORT OFF;
GO
USE master;
GO

-- The variables, before anything changes.
IF N'$(Instance)' = N'' OR N'$(Instance)' LIKE N'%[^A-Za-z0-9_]%' OR LEN(N'$(Instance)') > 100
    THROW 50034, N'Instance must be a short name of letters, digits and _ (it names the certificate): nothing was changed.', 1;
IF N'$(FarInstance)' <> N'none' AND (N'$(FarInstance)' = N'' OR N'$(FarInstance)' LIKE N'%[^A-Za-z0-9_]%'
                                     OR LEN(N'$(FarInstance)') > 100 OR N'$(FarInstance)' = N'$(Instance)')
    THROW 50035, N'FarInstance must be none or the far instance''s Instance name (letters, digits and _, not this one): nothing was changed.', 1;
IF TRY_CAST(N'$(Port)' AS int) IS NULL OR TRY_CAST(N'$(Port)' AS int) NOT BETWEEN 1 AND 65535
    THROW 50036, N'Port must be a TCP port number (4022 by custom): nothing was changed.', 1;
IF TRY_CONVERT(date, N'$(CertificateExpiry)', 112) IS NULL OR TRY_CONVERT(date, N'$(CertificateExpiry)', 112) <= SYSUTCDATETIME()
    THROW 50037, N'CertificateExpiry must be a date after today, as yyyymmdd: nothing was changed.', 1;
GO

-- The database master key of master protects the certificate's private key (CREATE
-- CERTIFICATE without ENCRYPTION BY PASSWORD). Made only where there is none.
IF NOT EXISTS (SELECT 1 FROM sys.symmetric_keys WHERE name = N'##MS_DatabaseMasterKey##')
    CREATE MASTER KEY ENCRYPTION BY PASSWORD = '$(MasterKeyPassword)';
GO

-- This instance's certificate: the endpoint authenticates with it, and the far instance
-- knows this instance by its public key.
IF NOT EXISTS (SELECT 1 FROM sys.certificates WHERE name = N'sbworker_broker_$(Instance)')
    CREATE CERTIFICATE [sbworker_broker_$(Instance)]
        WITH SUBJECT = N'sbworker Service Broker transport, instance $(Instance)',
             EXPIRY_DATE = '$(CertificateExpiry)';
GO

-- The endpoint: one per instance for Service Broker. TCP on every address (LISTENER_IP =
-- ALL: an availability group listener's address too), certificate authentication, the
-- transport encrypted with AES whatever the dialogs say (they are begun ENCRYPTION = OFF:
-- no dialog security, so this is the encryption on the wire). An instance that has a
-- Service Broker endpoint of another name keeps it (it is said below); one of this name
-- that is not started is started.
IF NOT EXISTS (SELECT 1 FROM sys.endpoints WHERE name = N'sbworker_broker')
   AND NOT EXISTS (SELECT 1 FROM sys.service_broker_endpoints)
    CREATE ENDPOINT [sbworker_broker]
        STATE = STARTED
        AS TCP (LISTENER_PORT = $(Port), LISTENER_IP = ALL)
        FOR SERVICE_BROKER (AUTHENTICATION = CERTIFICATE [sbworker_broker_$(Instance)],
                            ENCRYPTION = REQUIRED ALGORITHM AES);
GO
IF EXISTS (SELECT 1 FROM sys.service_broker_endpoints WHERE name = N'sbworker_broker' AND state_desc <> N'STARTED')
    ALTER ENDPOINT [sbworker_broker] STATE = STARTED;
GO
IF EXISTS (SELECT 1 FROM sys.service_broker_endpoints WHERE name <> N'sbworker_broker')
    PRINT N'This instance has a Service Broker endpoint of another name, which is kept: its authentication must take certificate sbworker_broker_$(Instance) and its port must be the one the far routes name.';
GO

-- The worker's login may see the endpoint's row (sys.service_broker_endpoints shows a
-- login only what it has a permission on): `sbworker selftest --side` checks it is STARTED.
IF SUSER_ID(N'$(WorkerLogin)') IS NOT NULL AND EXISTS (SELECT 1 FROM sys.endpoints WHERE name = N'sbworker_broker')
    GRANT VIEW DEFINITION ON ENDPOINT::[sbworker_broker] TO [$(WorkerLogin)];
GO

-- The public certificate (no private key) to a file, for the far instance's DBA. BACKUP
-- CERTIFICATE will not write over a file: on a run after the first the file is there
-- already (Msg 15240), which is said and not raised.
BEGIN TRY
    BACKUP CERTIFICATE [sbworker_broker_$(Instance)] TO FILE = N'$(CertificateFile)';
END TRY
BEGIN CATCH
    IF ERROR_NUMBER() <> 15240
        THROW;
    -- Not raised again: the file exists (an earlier run wrote it), or the path cannot be
    -- written; the message says which file, and the far instance's run reads it.
    PRINT CONCAT(N'The certificate was not written to $(CertificateFile) (Msg 15240: ', ERROR_MESSAGE(),
                 N'); if an earlier run wrote it, that copy stands.');
END CATCH
GO

-- The far instance, as Microsoft's "Allow Service Broker network access by using
-- certificates" sets it up: a login, its user in master owning the far instance's
-- certificate (the endpoint maps a connection that proves that certificate to this login),
-- and CONNECT on the endpoint. The login's password is random and never shown: nobody
-- logs in with it.
IF N'$(FarInstance)' <> N'none' AND SUSER_ID(N'sbworker_broker_$(FarInstance)') IS NULL
BEGIN
    DECLARE @password nvarchar(128) = CONCAT(NEWID(), N'-Aa1-', NEWID());
    DECLARE @create nvarchar(max) = N'CREATE LOGIN ' + QUOTENAME(N'sbworker_broker_$(FarInstance)')
        + N' WITH PASSWORD = ' + QUOTENAME(@password, N'''') + N', CHECK_POLICY = OFF;';
    EXEC sys.sp_executesql @create;
END
GO
IF N'$(FarInstance)' <> N'none' AND DATABASE_PRINCIPAL_ID(N'sbworker_broker_$(FarInstance)') IS NULL
    CREATE USER [sbworker_broker_$(FarInstance)] FOR LOGIN [sbworker_broker_$(FarInstance)];
GO
IF N'$(FarInstance)' <> N'none' AND NOT EXISTS (SELECT 1 FROM sys.certificates WHERE name = N'sbworker_broker_$(FarInstance)')
    CREATE CERTIFICATE [sbworker_broker_$(FarInstance)] AUTHORIZATION [sbworker_broker_$(FarInstance)]
        FROM FILE = N'$(FarCertificateFile)';
GO
IF N'$(FarInstance)' <> N'none' AND EXISTS (SELECT 1 FROM sys.endpoints WHERE name = N'sbworker_broker')
    GRANT CONNECT ON ENDPOINT::[sbworker_broker] TO [sbworker_broker_$(FarInstance)];
GO
