-- sbworker on SQL Server, optional script for a split deployment (docs/sqlserver.md, "Two
-- databases, two servers"): the routes between the roster's database and the
-- calculation's, and the SEND the far side needs. Runs in the side's database (after the
-- numbered scripts with the same Side, and optional/endpoint.sql in master on both
-- instances), by its owner; every run changes nothing that is already there. Variables
-- (sqlcmd -v, every one given; the other side's are not read, give none):
--   Database              this side's database
--   Side                  roster or calc (a one-database install needs no route)
--   CalcAddresses         roster side: every calculation instance's endpoint, comma
--                         separated (TCP://reken1.example:4022,TCP://reken2.example:4022),
--                         or an availability group listener's (TCP://reken-ag:4022). One
--                         route each, without BROKER_INSTANCE: SQL Server spreads the new
--                         dialogs over them (the original system's round-robin); a dialog
--                         stays where it began
--   RosterAddress         calculation side: the roster instance's endpoint (or its
--                         availability group listener's)
--   RosterBrokerInstance  calculation side: the roster database's Service Broker id
--                         (SELECT service_broker_guid FROM sys.databases WHERE name = ...,
--                         on the roster's instance)
-- For example:
--   sqlcmd -S rooster-db -d Payroll -I -b -i broker/mssql/optional/routes.sql -v Database=Payroll Side=roster
--     CalcAddresses=TCP://reken1:4022,TCP://reken2:4022 RosterAddress=none RosterBrokerInstance=none
--   sqlcmd -S reken1 -d Rekenserver -I -b -i broker/mssql/optional/routes.sql -v Database=Rekenserver Side=calc
--     CalcAddresses=none RosterAddress=TCP://rooster-db:4022 RosterBrokerInstance=5F1C...-...
-- Database mirroring instead of an availability group: a route takes the mirror's address
-- too (ALTER ROUTE name WITH MIRROR_ADDRESS = 'TCP://mirror:4022'); this script sets
-- none. A route to a server that is gone is not dropped here: the script names it.

:on error exit
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
IF '$(Side)' NOT IN ('roster', 'calc')
    THROW 50038, N'Side must be roster or calc: a one-database install (both) needs no route. Nothing was changed.', 1;
GO

-- The roster side: a route per calculation instance to RekenService. Named by its address
-- (sbworker_reken <address>), so a run with the same list finds them, and one with a new
-- address adds its route.
IF '$(Side)' = 'roster'
BEGIN
    DECLARE @address nvarchar(256), @route sysname, @sql nvarchar(max), @n int = 0;
    DECLARE addresses CURSOR LOCAL STATIC READ_ONLY FOR
        SELECT DISTINCT LTRIM(RTRIM(a.value)) FROM STRING_SPLIT(N'$(CalcAddresses)', N',') a
         WHERE LTRIM(RTRIM(a.value)) <> N'';
    OPEN addresses;
    FETCH NEXT FROM addresses INTO @address;
    WHILE @@FETCH_STATUS = 0
    BEGIN
        IF @address NOT LIKE N'TCP://%:%'
        BEGIN
            DECLARE @bad nvarchar(2048) = REPLACE(LEFT(CONCAT(N'CalcAddresses: ', @address,
                N' is not TCP://host:port (the far endpoint''s port): nothing more was changed.'), 1000), N'%', N'%%');   -- THROW reserves %
            THROW 50039, @bad, 1;
        END;
        SET @route = LEFT(N'sbworker_reken ' + @address, 128);
        SET @n += 1;
        IF NOT EXISTS (SELECT 1 FROM sys.routes WHERE name = @route)
        BEGIN
            SET @sql = N'CREATE ROUTE ' + QUOTENAME(@route)
                     + N' WITH SERVICE_NAME = N''/Rekenserver/LoonfactorBerekening/RekenService'', ADDRESS = '
                     + QUOTENAME(@address, N'''') + N';';
            EXEC sys.sp_executesql @sql;
        END;
        FETCH NEXT FROM addresses INTO @address;
    END;
    CLOSE addresses;
    DEALLOCATE addresses;
    IF @n = 0
        THROW 50040, N'CalcAddresses names no address: give every calculation instance''s TCP://host:port.', 1;
END
GO
-- Routes to RekenService that the list no longer names: said, not dropped (DROP ROUTE
-- name, once that server has no dialog open).
IF '$(Side)' = 'roster'
   AND EXISTS (SELECT 1 FROM sys.routes r
                WHERE r.remote_service_name = N'/Rekenserver/LoonfactorBerekening/RekenService'
                  AND NOT EXISTS (SELECT 1 FROM STRING_SPLIT(N'$(CalcAddresses)', N',') a
                                   WHERE LTRIM(RTRIM(a.value)) = r.address))
    PRINT N'Some routes to RekenService name an address CalcAddresses does not (SELECT name, address FROM sys.routes): drop those whose server is gone (DROP ROUTE), or new dialogs go there too.';
GO

-- The calculation side: one route back to DataService, at the roster's instance, for the
-- roster database's broker (the answers go on the dialogs that database began). Kept up
-- to date when the address or the broker id changes (a roster restored elsewhere, or
-- given a new broker id).
IF '$(Side)' = 'calc' AND (N'$(RosterAddress)' NOT LIKE N'TCP://%:%' OR TRY_CAST(N'$(RosterBrokerInstance)' AS uniqueidentifier) IS NULL)
    THROW 50041, N'RosterAddress must be TCP://host:port and RosterBrokerInstance the roster database''s service_broker_guid: nothing was changed.', 1;
GO
IF '$(Side)' = 'calc' AND NOT EXISTS (SELECT 1 FROM sys.routes WHERE name = N'sbworker_data')
    CREATE ROUTE [sbworker_data]
        WITH SERVICE_NAME = N'/Rekenserver/LoonfactorBerekening/DataService',
             BROKER_INSTANCE = N'$(RosterBrokerInstance)',
             ADDRESS = N'$(RosterAddress)';
ELSE IF '$(Side)' = 'calc' AND EXISTS (SELECT 1 FROM sys.routes WHERE name = N'sbworker_data'
                                       AND (address <> N'$(RosterAddress)' OR broker_instance IS NULL
                                            OR broker_instance <> N'$(RosterBrokerInstance)'))
    ALTER ROUTE [sbworker_data]
        WITH BROKER_INSTANCE = N'$(RosterBrokerInstance)',
             ADDRESS = N'$(RosterAddress)';
GO

-- Dialog security. The dialogs are begun with ENCRYPTION = OFF and no remote service
-- binding exists, so they have none ("Determining the Dialog Security Type"): what the
-- far side does runs as public in this database. public may therefore SEND on this side's
-- service: RekenService takes the requests, DataService the answers on the dialogs the
-- roster began (it takes no contract as a target, so no one can begin a dialog to it). The
-- transport is still authenticated by certificate and encrypted (optional/endpoint.sql).
-- For dialog security instead (each side's user known by a certificate, messages
-- encrypted end to end): docs/sqlserver.md, "Dialog security".
IF '$(Side)' = 'calc' AND EXISTS (SELECT 1 FROM sys.services WHERE name = N'/Rekenserver/LoonfactorBerekening/RekenService')
    GRANT SEND ON SERVICE::[/Rekenserver/LoonfactorBerekening/RekenService] TO public;
GO
IF '$(Side)' = 'roster' AND EXISTS (SELECT 1 FROM sys.services WHERE name = N'/Rekenserver/LoonfactorBerekening/DataService')
    GRANT SEND ON SERVICE::[/Rekenserver/LoonfactorBerekening/DataService] TO public;
GO
