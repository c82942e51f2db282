-- sbworker on SQL Server, script 01: message types, contract, queues and services of
-- the calculation dialog (as in the original system). Poison-message handling is OFF on both
-- queues: sbworker's attempt accounting is the poison rule (docs/retries.md). A queue
-- the broker already disabled stays disabled: re-enabling it is an operator's step.
--
-- Sides (sqlcmd variable Side, docs/sqlserver.md "Two databases, two servers"): both
-- (one database, as before), roster (the roster's database: the collector's DataService
-- and its queue) or calc (the calculation's database: RekenService and its queue).
-- Message types, contracts and the broker priority are made on every side: both ends of
-- a dialog need them. A part of one side is a region: a batch `IF <Side> NOT IN (...) SET
-- NOEXEC ON;` opens it and `SET NOEXEC OFF;` closes it; on another side its batches are
-- compiled, not run (SET NOEXEC), so nothing in them is made or changed.

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

IF NOT EXISTS (SELECT 1 FROM sys.service_message_types WHERE name = N'/Rekenserver/LoonfactorBerekening/Vraag')
    CREATE MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Vraag] VALIDATION = WELL_FORMED_XML;
GO
IF NOT EXISTS (SELECT 1 FROM sys.service_message_types WHERE name = N'/Rekenserver/LoonfactorBerekening/Antwoord')
    CREATE MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Antwoord] VALIDATION = WELL_FORMED_XML;
GO
IF NOT EXISTS (SELECT 1 FROM sys.service_message_types WHERE name = N'/Rekenserver/Fout')
    CREATE MESSAGE TYPE [/Rekenserver/Fout] VALIDATION = WELL_FORMED_XML;
GO

IF NOT EXISTS (SELECT 1 FROM sys.service_contracts WHERE name = N'/Rekenserver/LoonfactorBerekening/DataContract')
    CREATE CONTRACT [/Rekenserver/LoonfactorBerekening/DataContract] (
        [/Rekenserver/LoonfactorBerekening/Vraag] SENT BY INITIATOR,
        [/Rekenserver/LoonfactorBerekening/Antwoord] SENT BY TARGET,
        [/Rekenserver/Fout] SENT BY TARGET);
GO

-- Recompute (`sbworker recompute`) begins its dialogs on a contract of its own (the same
-- messages, the same services: a key's dialogs share its conversation group, and a
-- group holds the conversations of one service, BEGIN DIALOG CONVERSATION's remarks), so
-- that a conversation priority can tell them from the planners': level 3 on both sides,
-- below the default 5. Priorities always apply to RECEIVE (HONOR_BROKER_PRIORITY concerns
-- SEND between instances): a recompute's waiting requests do not stand in front of a
-- planner's (one a reader already holds is finished first).
IF NOT EXISTS (SELECT 1 FROM sys.service_contracts WHERE name = N'/Rekenserver/LoonfactorBerekening/HerberekenContract')
    CREATE CONTRACT [/Rekenserver/LoonfactorBerekening/HerberekenContract] (
        [/Rekenserver/LoonfactorBerekening/Vraag] SENT BY INITIATOR,
        [/Rekenserver/LoonfactorBerekening/Antwoord] SENT BY TARGET,
        [/Rekenserver/Fout] SENT BY TARGET);
GO
-- A key's dialog kept open for its next versions (conversation reuse: the setting
-- 'dialog_reuse_idle_seconds' of Rekenserver.instelling; off without it) goes on a
-- contract of its own, so that each side knows from the dialog that it does not end with
-- an answer: the collector ends it once the key has been idle that long (its conversation
-- timer), and the calculation side ends on the EndDialog. The same messages, the same
-- services (a key's dialogs share its conversation group).
IF NOT EXISTS (SELECT 1 FROM sys.service_contracts WHERE name = N'/Rekenserver/LoonfactorBerekening/SleutelContract')
    CREATE CONTRACT [/Rekenserver/LoonfactorBerekening/SleutelContract] (
        [/Rekenserver/LoonfactorBerekening/Vraag] SENT BY INITIATOR,
        [/Rekenserver/LoonfactorBerekening/Antwoord] SENT BY TARGET,
        [/Rekenserver/Fout] SENT BY TARGET);
GO

-- The calculation's queue (target side) and the answers' queue (initiator side).
-- Poison-message handling is off: sbworker's durable attempt accounting is the poison
-- rule on the queues it serves (a message failing by its own fault is answered with a
-- Fout and set aside after worker.max_attempts). The broker's rule (disable the queue
-- after five rolled-back RECEIVEs in a row) would count deadlock victims and dropped
-- connections too, and stop every group for one message. An existing queue that has it
-- on is altered (only then: ALTER QUEUE takes a schema lock on a live queue).
-- The services are owned by the worker's user: it owns the conversations it receives and
-- can end them.
--
-- The calculation's side: its queue and RekenService, which takes the three contracts.
IF '$(Side)' NOT IN ('both', 'calc') SET NOEXEC ON;   -- the calculation side only, to SET NOEXEC OFF
GO
IF NOT EXISTS (SELECT 1 FROM sys.service_queues WHERE name = N'loonfactorberekening_reken' AND schema_id = SCHEMA_ID(N'dbo'))
    CREATE QUEUE dbo.loonfactorberekening_reken
        WITH STATUS = ON, RETENTION = OFF, POISON_MESSAGE_HANDLING (STATUS = OFF);
ELSE IF EXISTS (SELECT 1 FROM sys.service_queues WHERE name = N'loonfactorberekening_reken'
                 AND schema_id = SCHEMA_ID(N'dbo') AND is_poison_message_handling_enabled = 1)
    ALTER QUEUE dbo.loonfactorberekening_reken WITH POISON_MESSAGE_HANDLING (STATUS = OFF);
GO
IF NOT EXISTS (SELECT 1 FROM sys.services WHERE name = N'/Rekenserver/LoonfactorBerekening/RekenService')
    CREATE SERVICE [/Rekenserver/LoonfactorBerekening/RekenService] AUTHORIZATION [$(WorkerUser)]
        ON QUEUE dbo.loonfactorberekening_reken ([/Rekenserver/LoonfactorBerekening/DataContract]);
GO
IF NOT EXISTS (SELECT 1 FROM sys.service_contract_usages u
                JOIN sys.services s ON s.service_id = u.service_id
                JOIN sys.service_contracts c ON c.service_contract_id = u.service_contract_id
                WHERE s.name = N'/Rekenserver/LoonfactorBerekening/RekenService'
                  AND c.name = N'/Rekenserver/LoonfactorBerekening/HerberekenContract')
    ALTER SERVICE [/Rekenserver/LoonfactorBerekening/RekenService]
        (ADD CONTRACT [/Rekenserver/LoonfactorBerekening/HerberekenContract]);
GO
IF NOT EXISTS (SELECT 1 FROM sys.service_contract_usages u
                JOIN sys.services s ON s.service_id = u.service_id
                JOIN sys.service_contracts c ON c.service_contract_id = u.service_contract_id
                WHERE s.name = N'/Rekenserver/LoonfactorBerekening/RekenService'
                  AND c.name = N'/Rekenserver/LoonfactorBerekening/SleutelContract')
    ALTER SERVICE [/Rekenserver/LoonfactorBerekening/RekenService]
        (ADD CONTRACT [/Rekenserver/LoonfactorBerekening/SleutelContract]);
GO
SET NOEXEC OFF;
GO
-- The roster's side: the answers' queue and DataService, the dialogs' initiator (it takes
-- no contract: no dialog is begun to it).
IF '$(Side)' NOT IN ('both', 'roster') SET NOEXEC ON;   -- the roster side only, to SET NOEXEC OFF
GO
IF NOT EXISTS (SELECT 1 FROM sys.service_queues WHERE name = N'loonfactorberekening_data' AND schema_id = SCHEMA_ID(N'dbo'))
    CREATE QUEUE dbo.loonfactorberekening_data
        WITH STATUS = ON, RETENTION = OFF, POISON_MESSAGE_HANDLING (STATUS = OFF);
ELSE IF EXISTS (SELECT 1 FROM sys.service_queues WHERE name = N'loonfactorberekening_data'
                 AND schema_id = SCHEMA_ID(N'dbo') AND is_poison_message_handling_enabled = 1)
    ALTER QUEUE dbo.loonfactorberekening_data WITH POISON_MESSAGE_HANDLING (STATUS = OFF);
GO

IF NOT EXISTS (SELECT 1 FROM sys.services WHERE name = N'/Rekenserver/LoonfactorBerekening/DataService')
    CREATE SERVICE [/Rekenserver/LoonfactorBerekening/DataService] AUTHORIZATION [$(WorkerUser)]
        ON QUEUE dbo.loonfactorberekening_data;
GO
SET NOEXEC OFF;
GO
-- The recompute's priority, on every side: LOCAL_SERVICE_NAME = ANY covers RekenService
-- where the calculation runs and DataService where the answers come back.
IF NOT EXISTS (SELECT 1 FROM sys.conversation_priorities WHERE name = N'herberekening')
    CREATE BROKER PRIORITY herberekening FOR CONVERSATION
        SET (CONTRACT_NAME = [/Rekenserver/LoonfactorBerekening/HerberekenContract],
             LOCAL_SERVICE_NAME = ANY,
             REMOTE_SERVICE_NAME = ANY,
             PRIORITY_LEVEL = 3);
GO
