//! The one integration-test binary (one binary links once). Each module is a
//! topic; shared helpers live in `common`.

mod bench_quick;
mod broker_pg;
mod broker_pg_races;
mod cli_calc;
mod cli_run;
mod common;
mod conformance;
mod conformance_worker;
mod contract_examples;
mod contract_props;
mod doc_links;
mod emulator_tds;
mod engine_cases;
mod engine_props;
mod handoff_pg;
mod layers;
mod mssql_real;
mod mssql_scripts;
mod ops;
mod packaging;
mod pg_roles;
mod pg_tls;
mod pipeline_pg;
mod repairs_pg;
mod secrets;
mod selftest;
mod transient_faults;
mod worker_pg;
mod worker_process;
