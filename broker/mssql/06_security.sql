-- sbworker on SQL Server, script 06: what the worker's role may do, and nothing more:
-- RECEIVE on its queues, SEND on the services it answers from and sends to, EXECUTE on
-- the procedures it calls. No db_owner, no TRUSTWORTHY, no CLR.

:setvar Database Payroll
:on error exit
USE [$(Database)];
GO

GRANT RECEIVE ON OBJECT::dbo.loonfactorberekening_reken TO sbworker_role;
GRANT RECEIVE ON OBJECT::dbo.loonfactorberekening_data TO sbworker_role;
GO
GRANT SEND ON SERVICE::[/Rekenserver/LoonfactorBerekening/RekenService] TO sbworker_role;
GRANT SEND ON SERVICE::[/Rekenserver/LoonfactorBerekening/DataService] TO sbworker_role;
-- Rekenserver.stuur_vraag begins dialogs as the worker's user (BEGIN DIALOG needs
-- REFERENCES on the contract and RECEIVE on the FROM service's queue).
GRANT REFERENCES ON CONTRACT::[/Rekenserver/LoonfactorBerekening/DataContract] TO sbworker_role;
GO
GRANT EXECUTE ON OBJECT::sbworker.tel_pogingen TO sbworker_role;
GRANT EXECUTE ON OBJECT::sbworker.noteer_mislukking TO sbworker_role;
GRANT EXECUTE ON OBJECT::sbworker.vergeet_pogingen TO sbworker_role;
GRANT EXECUTE ON OBJECT::sbworker.zet_apart TO sbworker_role;
GRANT EXECUTE ON OBJECT::sbworker.claim_versie TO sbworker_role;
GRANT EXECUTE ON OBJECT::sbworker.wachtrij_status TO sbworker_role;
GRANT EXECUTE ON OBJECT::Rekenserver.sla_antwoord_op TO sbworker_role;
GRANT EXECUTE ON OBJECT::Rekenserver.noteer_fout TO sbworker_role;
GRANT EXECUTE ON OBJECT::Rekenserver.export_claim TO sbworker_role;
GRANT EXECUTE ON OBJECT::Rekenserver.export_ack TO sbworker_role;
GRANT EXECUTE ON OBJECT::Rekenserver.sweep TO sbworker_role;
GO
