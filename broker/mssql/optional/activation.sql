-- sbworker on SQL Server, optional script (run by hand after the numbered ones, in each
-- side's database, by its owner): event-based activation for the queues a worker serves
-- with min_readers = 0 (docs/operations.md, "Idle queues"). Without it such a queue's
-- supervisor looks at the queue at every scale interval; with it, it waits in a RECEIVE
-- on sbworker.activation for SQL Server's QUEUE_ACTIVATION event, as the External
-- Activator does, and looks only when the event names its queue (or after 30 s).
-- Every run changes nothing that is already there. Variables (sqlcmd -v, every one given):
--   Database     this side's database
--   WorkerUser   the worker's database user (it owns the notifications' service)
--   Side         both, roster or calc, as the numbered scripts were run: which of the
--                two queues get an event notification
-- For example:
--   sqlcmd -S db -d Payroll -I -b -i broker/mssql/optional/activation.sql -v Database=Payroll
--     WorkerUser=sbworker Side=both
--
-- When SQL Server raises QUEUE_ACTIVATION (Understanding When Activation Occurs): a queue
-- with a QUEUE_ACTIVATION event notification has a queue monitor, which checks every few
-- seconds and at each arrival, RECEIVE, rolled-back RECEIVE and ALTER QUEUE whether a new
-- reader would have work: a message arrives on a queue with no unread messages, or
-- messages wait while no session waits in a RECEIVE (without WHERE) or GET CONVERSATION
-- GROUP and none of those came back empty for a few seconds. It then sends the event
-- and sends no other for a time-out, until a RECEIVE on the queue or the time-out's end;
-- so the event repeats while activation is needed. MAX_QUEUE_READERS bounds activated
-- procedures only: an event does not count readers (the worker keeps honouring the
-- queue's MAX_QUEUE_READERS itself). A queue cannot have both: with an activation
-- procedure (ACTIVATION (PROCEDURE_NAME = ...)) CREATE EVENT NOTIFICATION ... FOR
-- QUEUE_ACTIVATION fails (Msg 9718), and the procedure cannot be set on a queue with the
-- event notification (Msg 9717): such a queue is left out below, with a message. To use
-- the in-database collector (Rekenserver.antwoorden_activatie, 03_results.sql) on the
-- answers' queue, drop its event notification first:
--   DROP EVENT NOTIFICATION sbworker_activation_data ON QUEUE dbo.loonfactorberekening_data;
--
-- The notifications wait in sbworker.activation until an idle supervisor receives them
-- (while every queue has readers, they gather: at most about one per queue and
-- time-out while messages wait with every reader busy; the next idle wait takes them a
-- thousand at a time). Do not end their conversations: an event notification's
-- conversations stay open until it is dropped (CREATE EVENT NOTIFICATION).

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
IF '$(Side)' NOT IN ('both', 'roster', 'calc')
    THROW 50032, N'The sqlcmd variable Side must be both, roster or calc (-v Side=both): nothing was changed.', 1;
GO

-- On every side: the queue the notifications go to, and a service on it for the event
-- notifications' contract (the target service must honour it: CREATE EVENT
-- NOTIFICATION, Remarks). Owned by the worker's user, as the other services: it owns the
-- conversations it receives on (END CONVERSATION of an ended one needs the owner).
-- Poison-message handling off: the worker receives outside any transaction, and no
-- rollback should ever disable the queue.
IF NOT EXISTS (SELECT 1 FROM sys.service_queues WHERE name = N'activation' AND schema_id = SCHEMA_ID(N'sbworker'))
    CREATE QUEUE sbworker.activation
        WITH STATUS = ON, RETENTION = OFF, POISON_MESSAGE_HANDLING (STATUS = OFF);
GO
IF NOT EXISTS (SELECT 1 FROM sys.services WHERE name = N'/sbworker/Activation')
    CREATE SERVICE [/sbworker/Activation] AUTHORIZATION [$(WorkerUser)]
        ON QUEUE sbworker.activation ([http://schemas.microsoft.com/SQL/Notifications/PostEventNotification]);
GO
GRANT RECEIVE ON OBJECT::sbworker.activation TO sbworker_role;
GO

-- The calculation's side: QUEUE_ACTIVATION of its queue (ALTER on the queue needed: the
-- database's owner has it), unless an activation procedure is set on it.
IF '$(Side)' NOT IN ('both', 'calc') SET NOEXEC ON;   -- the calculation side only, to SET NOEXEC OFF
GO
IF NOT EXISTS (SELECT 1 FROM sys.event_notifications
                WHERE name = N'sbworker_activation_reken' AND parent_class = 1
                  AND parent_id = OBJECT_ID(N'dbo.loonfactorberekening_reken'))
   AND NOT EXISTS (SELECT 1 FROM sys.service_queues
                    WHERE object_id = OBJECT_ID(N'dbo.loonfactorberekening_reken') AND activation_procedure IS NOT NULL)
    CREATE EVENT NOTIFICATION sbworker_activation_reken
        ON QUEUE dbo.loonfactorberekening_reken
        FOR QUEUE_ACTIVATION
        TO SERVICE '/sbworker/Activation', 'current database';
GO
IF EXISTS (SELECT 1 FROM sys.service_queues
            WHERE object_id = OBJECT_ID(N'dbo.loonfactorberekening_reken') AND activation_procedure IS NOT NULL)
    PRINT N'dbo.loonfactorberekening_reken has an activation procedure: no event notification (Msg 9718); its idle supervisor looks at every scale interval.';
GO
SET NOEXEC OFF;
GO

-- The roster's side: QUEUE_ACTIVATION of the answers' queue, the same way.
IF '$(Side)' NOT IN ('both', 'roster') SET NOEXEC ON;   -- the roster side only, to SET NOEXEC OFF
GO
IF NOT EXISTS (SELECT 1 FROM sys.event_notifications
                WHERE name = N'sbworker_activation_data' AND parent_class = 1
                  AND parent_id = OBJECT_ID(N'dbo.loonfactorberekening_data'))
   AND NOT EXISTS (SELECT 1 FROM sys.service_queues
                    WHERE object_id = OBJECT_ID(N'dbo.loonfactorberekening_data') AND activation_procedure IS NOT NULL)
    CREATE EVENT NOTIFICATION sbworker_activation_data
        ON QUEUE dbo.loonfactorberekening_data
        FOR QUEUE_ACTIVATION
        TO SERVICE '/sbworker/Activation', 'current database';
GO
IF EXISTS (SELECT 1 FROM sys.service_queues
            WHERE object_id = OBJECT_ID(N'dbo.loonfactorberekening_data') AND activation_procedure IS NOT NULL)
    PRINT N'dbo.loonfactorberekening_data has an activation procedure: no event notification (Msg 9718); its idle supervisor looks at every scale interval.';
GO
SET NOEXEC OFF;
GO
