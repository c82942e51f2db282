-- sbworker on SQL Server, script 07 (last): what each role may do, and nothing more. The
-- worker's role: RECEIVE on its queues, SEND on the services it answers from and sends
-- to, EXECUTE on the procedures it calls. The roster's editors, the payroll export and
-- the housekeeping each get their own job's rights, as the four roles on PostgreSQL.
-- No db_owner, no TRUSTWORTHY, no CLR.

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

-- On every side (docs/sqlserver.md, "Two databases, two servers"): the contracts, the
-- worker's bookkeeping and heartbeat, the status and the dead letters.
-- Rekenserver.stuur_vraag begins dialogs as the worker's user (BEGIN DIALOG needs
-- REFERENCES on the contract and RECEIVE on the FROM service's queue).
GRANT REFERENCES ON CONTRACT::[/Rekenserver/LoonfactorBerekening/DataContract] TO sbworker_role;
GRANT REFERENCES ON CONTRACT::[/Rekenserver/LoonfactorBerekening/SleutelContract] TO sbworker_role;
GRANT REFERENCES ON CONTRACT::[/Rekenserver/LoonfactorBerekening/HerberekenContract] TO sbworker_role;
GO
GRANT EXECUTE ON OBJECT::sbworker.count_attempts TO sbworker_role;
GRANT EXECUTE ON OBJECT::sbworker.note_failure TO sbworker_role;
GRANT EXECUTE ON OBJECT::sbworker.forget_attempts TO sbworker_role;
GRANT EXECUTE ON OBJECT::sbworker.set_aside TO sbworker_role;
GRANT EXECUTE ON OBJECT::sbworker.queue_state TO sbworker_role;
GRANT EXECUTE ON OBJECT::sbworker.reader_slot TO sbworker_role;
GRANT EXECUTE ON OBJECT::sbworker.reader_slot_free TO sbworker_role;
GRANT EXECUTE ON OBJECT::sbworker.module_options TO sbworker_role;
GRANT EXECUTE ON OBJECT::sbworker.transport_state TO sbworker_role;
GRANT EXECUTE ON OBJECT::sbworker.heartbeat TO sbworker_role;
GRANT EXECUTE ON OBJECT::sbworker.heartbeat_end TO sbworker_role;
GO
-- The housekeeping: status and dead letters (on the roster side, below, also the sweep,
-- the keys the triggers never saw, recompute and explain).
GRANT EXECUTE ON OBJECT::sbworker.status_report TO sbworker_housekeeping_role;
GRANT EXECUTE ON OBJECT::sbworker.rates TO sbworker_housekeeping_role;
GRANT EXECUTE ON OBJECT::sbworker.dead_letters TO sbworker_housekeeping_role;
GRANT EXECUTE ON OBJECT::sbworker.dead_letter_show TO sbworker_housekeeping_role;
GRANT EXECUTE ON OBJECT::sbworker.replay_dead_letter TO sbworker_housekeeping_role;
GRANT EXECUTE ON OBJECT::sbworker.purge_dead_letters TO sbworker_housekeeping_role;
GRANT EXECUTE ON OBJECT::sbworker.dead_letter_page TO sbworker_housekeeping_role;
GRANT EXECUTE ON OBJECT::sbworker.dead_letter_count TO sbworker_housekeeping_role;
GRANT EXECUTE ON OBJECT::sbworker.purge_dead_letters_matching TO sbworker_housekeeping_role;
GRANT EXECUTE ON OBJECT::sbworker.note_action TO sbworker_housekeeping_role;
GRANT EXECUTE ON OBJECT::sbworker.actions TO sbworker_housekeeping_role;
GO
-- The operator's role: status and dead letters (06_operations.sql), nothing else.
GRANT EXECUTE ON OBJECT::sbworker.status_report TO sbworker_operator_role;
GRANT EXECUTE ON OBJECT::sbworker.rates TO sbworker_operator_role;
GRANT EXECUTE ON OBJECT::sbworker.dead_letters TO sbworker_operator_role;
GRANT EXECUTE ON OBJECT::sbworker.dead_letter_show TO sbworker_operator_role;
GRANT EXECUTE ON OBJECT::sbworker.replay_dead_letter TO sbworker_operator_role;
GRANT EXECUTE ON OBJECT::sbworker.purge_dead_letters TO sbworker_operator_role;
GRANT EXECUTE ON OBJECT::sbworker.dead_letter_page TO sbworker_operator_role;
GRANT EXECUTE ON OBJECT::sbworker.dead_letter_count TO sbworker_operator_role;
GRANT EXECUTE ON OBJECT::sbworker.purge_dead_letters_matching TO sbworker_operator_role;
GRANT EXECUTE ON OBJECT::sbworker.note_action TO sbworker_operator_role;
GRANT EXECUTE ON OBJECT::sbworker.actions TO sbworker_operator_role;
-- The monitor's role: the status, nothing else.
GRANT EXECUTE ON OBJECT::sbworker.status_report TO sbworker_monitor_role;
GRANT EXECUTE ON OBJECT::sbworker.rates TO sbworker_monitor_role;
GO
-- Which side the database holds (02_worker.sql): every role whose commands refuse the
-- wrong side reads it.
GRANT EXECUTE ON OBJECT::sbworker.side TO sbworker_role;
GRANT EXECUTE ON OBJECT::sbworker.side TO sbworker_payroll_role;
GRANT EXECUTE ON OBJECT::sbworker.side TO sbworker_housekeeping_role;
GRANT EXECUTE ON OBJECT::sbworker.side TO sbworker_operator_role;
GRANT EXECUTE ON OBJECT::sbworker.side TO sbworker_monitor_role;
GO

-- The calculation's side: its queue, its service, the version claim.
IF '$(Side)' NOT IN ('both', 'calc') SET NOEXEC ON;   -- the calculation side only, to SET NOEXEC OFF
GO
GRANT RECEIVE ON OBJECT::dbo.loonfactorberekening_reken TO sbworker_role;
GRANT SEND ON SERVICE::[/Rekenserver/LoonfactorBerekening/RekenService] TO sbworker_role;
GRANT EXECUTE ON OBJECT::sbworker.claim_version TO sbworker_role;
GO
SET NOEXEC OFF;
GO

-- The roster's side: the answers' queue and service, the collector's procedures, and the
-- jobs of the roster's editors, the payroll export and the housekeeping.
IF '$(Side)' NOT IN ('both', 'roster') SET NOEXEC ON;   -- the roster side only, to SET NOEXEC OFF
GO
GRANT RECEIVE ON OBJECT::dbo.loonfactorberekening_data TO sbworker_role;
GRANT SEND ON SERVICE::[/Rekenserver/LoonfactorBerekening/DataService] TO sbworker_role;
GO
GRANT EXECUTE ON OBJECT::Rekenserver.sla_antwoord_op TO sbworker_role;
GRANT EXECUTE ON OBJECT::Rekenserver.noteer_fout TO sbworker_role;
GRANT EXECUTE ON OBJECT::Rekenserver.dialoog_stil TO sbworker_role;
GRANT EXECUTE ON OBJECT::Rekenserver.selftest TO sbworker_role;
GO
-- The export and the sweep are not the worker's (an earlier install granted them to it).
REVOKE EXECUTE ON OBJECT::Rekenserver.export_claim FROM sbworker_role;
REVOKE EXECUTE ON OBJECT::Rekenserver.export_ack FROM sbworker_role;
REVOKE EXECUTE ON OBJECT::Rekenserver.sweep FROM sbworker_role;
GO
-- The roster's editors: the roster's tables; their triggers send (as the worker's user).
GRANT SELECT, INSERT, UPDATE, DELETE ON SCHEMA::Rooster TO sbworker_sender_role;
-- The payroll export: claim and confirm.
GRANT EXECUTE ON OBJECT::Rekenserver.export_claim TO sbworker_payroll_role;
GRANT EXECUTE ON OBJECT::Rekenserver.export_ack TO sbworker_payroll_role;
-- The housekeeping: the sweep, the keys the triggers never saw, recompute, explain.
GRANT EXECUTE ON OBJECT::Rekenserver.sweep TO sbworker_housekeeping_role;
GRANT EXECUTE ON OBJECT::Rekenserver.markeer_sleutels TO sbworker_housekeeping_role;
GRANT EXECUTE ON OBJECT::Rekenserver.markeer_verloren TO sbworker_housekeeping_role;
GRANT EXECUTE ON OBJECT::Rekenserver.herbereken_sleutels TO sbworker_housekeeping_role;
GRANT EXECUTE ON OBJECT::Rekenserver.herbereken TO sbworker_housekeeping_role;
GRANT EXECUTE ON OBJECT::Rekenserver.herberekening_begin TO sbworker_housekeeping_role;
GRANT EXECUTE ON OBJECT::Rekenserver.herberekening_einde TO sbworker_housekeeping_role;
GRANT EXECUTE ON OBJECT::Rekenserver.herberekening_voortgang TO sbworker_housekeeping_role;
GRANT EXECUTE ON OBJECT::Rekenserver.runs TO sbworker_housekeeping_role;
GRANT EXECUTE ON OBJECT::Rekenserver.export_batches TO sbworker_housekeeping_role;
GRANT EXECUTE ON OBJECT::Rekenserver.export_batches TO sbworker_payroll_role;
GRANT EXECUTE ON OBJECT::Rekenserver.bewijs TO sbworker_housekeeping_role;
GRANT EXECUTE ON OBJECT::Rekenserver.bewijs TO sbworker_payroll_role;
GRANT EXECUTE ON OBJECT::Rekenserver.sleutels_zoek TO sbworker_housekeeping_role;
GRANT EXECUTE ON OBJECT::Rekenserver.sleutels_zoek TO sbworker_payroll_role;
GRANT EXECUTE ON OBJECT::Rekenserver.sleutel_tijdlijn TO sbworker_housekeeping_role;
GRANT EXECUTE ON OBJECT::Rekenserver.sleutel_tijdlijn TO sbworker_payroll_role;
GO
SET NOEXEC OFF;
GO

-- The version of these scripts, for `sbworker selftest` (an extended property of the
-- database: the crate's version and a hash of the scripts; a test keeps it current).
IF NOT EXISTS (SELECT 1 FROM sys.extended_properties WHERE class = 0 AND name = N'sbworker_version')
    EXEC sys.sp_addextendedproperty @name = N'sbworker_version', @value = N'0.1.0+14288db1d87b5e7f';
ELSE
    EXEC sys.sp_updateextendedproperty @name = N'sbworker_version', @value = N'0.1.0+14288db1d87b5e7f';
GO
