//! The command line: every subcommand, its flags, its help and examples (clap).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::contract::Limits;

#[derive(Parser)]
#[command(name = "sbworker", version, about = "Service Broker worker for payroll recalculation")]
pub struct Args {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Compute the wage factors of one Vraag: the Antwoord on stdout (exit 0), or a
    /// RekenserverFout on stdout and the reason on stderr (exit 2).
    #[command(after_help = "Examples:\n  \
        sbworker calc schemas/examples/valid/vraag-voorbeeld2.xml\n  \
        sbworker calc --explain schemas/examples/valid/vraag-voorbeeld1.xml\n  \
        cat vraag.xml | sbworker calc -")]
    Calc(CalcArgs),
    /// Run the worker: serve the configured queues until SIGTERM or SIGINT (a second
    /// signal, or the grace period running out, aborts and rolls back what is in flight).
    #[command(after_help = "Every key of the file can be overridden from the environment, with __ between\n\
        levels: SBWORKER__BROKER__CONNECTION, SBWORKER__QUEUES__<QUEUE>__MAX_READERS, ...\n\
        Flags override both.\n\n\
        Examples:\n  \
        sbworker run --config sbworker.toml\n  \
        SBWORKER__LOG__FORMAT=json sbworker run --config sbworker.toml --metrics-listen 0.0.0.0:9187\n\n\
        Exit status: 0 after a clean drain, 1 on an error or an aborted drain, 78 for a bad configuration.")]
    Run(RunArgs),
    #[cfg(feature = "tools")]
    /// `run`, serving the bench's handlers as well: the worker processes `sbworker bench`
    /// starts.
    #[command(hide = true)]
    BenchWorker(BenchWorkerArgs),
    /// Check a configuration and print the effective one (file, environment, flags) with
    /// secrets masked.
    #[command(after_help = "Examples:\n  \
        sbworker check-config --config sbworker.toml\n  \
        SBWORKER__QUEUES__BEREKENING__MAX_READERS=8 sbworker check-config --config sbworker.toml\n\n\
        Exit status: 0 when valid, 78 with the key that is wrong otherwise.")]
    CheckConfig(CheckConfigArgs),
    #[cfg(feature = "tools")]
    /// The whole pipeline, end to end, on a throwaway PostgreSQL cluster: roster, triggers,
    /// calculation and collector workers, a burst of planner edits, results, figures, and
    /// a check that every key holds its latest version.
    #[command(after_help = "Examples:\n  \
        sbworker demo\n  \
        sbworker demo --size 1000 --readers 8\n  \
        sbworker demo --mssql --dialog-reuse-idle-seconds 2\n  \
        sbworker demo --postgres 'host=localhost user=payroll dbname=empty_demo'\n\n\
        Exit status: 0 when every key holds its latest result; 1 otherwise, with the reason.")]
    Demo(DemoArgs),
    /// Hand a period's results to payroll: claim the unexported ones in one statement and
    /// write them (CSV: one row per factor; JSON: factors nested per employee).
    #[command(after_help = "Modes:\n  \
        once   marked exported when claimed (at-most-once)\n  \
        lease  claimed for --lease-minutes; confirm with --ack BATCH (at-least-once: an\n         \
        unconfirmed claim comes back after the lease)\n\n\
        Examples:\n  \
        sbworker export --postgres URL --periode 202604 --format csv --out april.csv\n  \
        sbworker export --postgres URL --periode 202604 --mode lease --format json\n  \
        sbworker export --postgres URL --ack 5b0c6f7e-0f5d-4a8e-9c61-2f3b9d1e4a77\n  \
        sbworker export --mssql 'Server=tcp:db,1433;Database=Payroll;User Id=salaris;Password=...' --periode 202604")]
    Export(ExportArgs),
    /// Send a Vraag for every key whose roster is newer than its stored result (and has
    /// none in flight), under a lock, a fuse and a run log with retention.
    #[command(after_help = "An overlapping run exits at once and logs itself as skipped. After a bulk import with\n\
        SET rekenserver.vragen_uit = on, repeated sweeps send each stale key once, at most --fuse\n\
        per run. The run log is rekenserver.run_log.\n\n\
        Examples:\n  \
        sbworker sweep --postgres URL\n  \
        sbworker sweep --postgres URL --fuse 2000 --retention-days 90\n  \
        sbworker sweep --mssql 'Server=tcp:db,1433;Database=Payroll;User Id=beheer;Password=...'   (Rekenserver.sweep)")]
    Sweep(SweepArgs),
    /// A stored result explained: its factors, what changed since the version stored
    /// before it, and the engine's explanation of the Vraag as it was sent, with a
    /// warning where today's engine or rate tables compute something else.
    #[command(
        after_help = "Every stored version keeps the Vraag as sent and its factors (rekenserver.resultaat_historie;\n\
        kept for [sweep] evidence_retention_months, the latest version of each key always).\n\
        Exit 0 with the explanation, 1 when the key has no such stored version.\n\n\
        Examples:\n  \
        sbworker explain --postgres URL --dienstverband 1001 --periode 202604\n  \
        sbworker explain --postgres URL --dienstverband 1001 --periode 202604 --versie 3 --json\n  \
        sbworker explain --postgres URL --dienstverband 1001 --periode 202604 --tables new-cao.toml\n  \
        sbworker explain --mssql CONN --dienstverband 1001 --periode 202604"
    )]
    Explain(ExplainArgs),
    /// Compute keys again after a change no roster edit makes (new rate tables, a CAO
    /// change, a corrected period): each key's version rises and its Vraag is sent, in
    /// short transactions, as a roster edit does, at a lower conversation priority than
    /// planners' edits.
    #[command(after_help = "Choose the keys by period, CAO, employee range, or name them; every filter given must\n\
        hold, and at least one is needed (--all for every key). Progress goes to stderr, the run\n\
        to rekenserver.run_log (stap 'herberekening'). At --fuse keys the run stops and says where\n\
        to go on (--after). One recompute at a time; a sweep may run beside it.\n\n\
        Examples:\n  \
        sbworker recompute --postgres URL --periode 202604 --dry-run\n  \
        sbworker recompute --postgres URL --periode 202604 --periode 202605 --cao ZKH\n  \
        sbworker recompute --postgres URL --dienstverband-van 1000 --dienstverband-tot 1999 --batch 200\n  \
        sbworker recompute --postgres URL --sleutel 1001:202604 --sleutel 1002:202604\n  \
        sbworker recompute --postgres URL --all --fuse 100000 --after 1500:202604\n  \
        sbworker recompute --mssql CONN --periode 202604")]
    Recompute(RecomputeArgs),
    #[cfg(feature = "tools")]
    /// Measure sbworker side by side with River, graphile-worker and the machine's limit
    /// (pgbench doing the same commits and writes) on a throwaway cluster; writes
    /// report.md, results.json and plots.
    #[command(after_help = "Examples:\n  \
        cargo run --release --features tools -- bench --out bench-report            (the full bench: two hours or more)\n  \
        cargo run --release --features tools -- bench --quick --out /tmp/bench      (every part at a tiny size)\n  \
        cargo run --release --features tools -- bench --groups 200 --per-group 50 --reps 3\n  \
        cargo run --release --features tools -- bench --parts headline --groups 200 --per-group 20   (an A/B of a change)\n  \
        cargo run --release --features tools -- bench --parts bloat --contenders sbworker-pg,river-per-group\n  \
        cargo run --release --features tools -- bench --parts pipeline --skip-peers --groups-per-transaction 4   (batched commits, B of an A/B)\n  \
        cargo run --release --features tools -- bench --parts pipeline --skip-peers --pipeline-readers 1,4 --pipeline-employees 1600   (a longer pipeline run, two reader counts)\n  \
        sbworker bench --render bench-report/results.json --out /tmp/again   (the report again, nothing measured)")]
    Bench(BenchArgs),
    #[cfg(feature = "tools")]
    /// A Service Broker emulator: a TDS endpoint (TLS for clients that ask) running the Service Broker
    /// statements the worker uses on the PostgreSQL broker, for developing and testing
    /// against "SQL Server" where none can run.
    #[command(after_help = "Examples:\n  \
        sbworker emulator --listen 127.0.0.1:14330\n  \
        sbworker emulator --listen 127.0.0.1:14330 --postgres 'host=localhost dbname=broker' --user sbworker\n  \
        sbworker emulator --fault-deadlock-every 10 --fault-delay-ms 5   (fault injection for tests)\n  \
        sbworker emulator --instance PAYROLL --browser 127.0.0.1:1434   (then Server=127.0.0.1\\PAYROLL)\n\n\
        Then: [broker] kind = \"mssql\", connection = \"Server=tcp:127.0.0.1,14330;User Id=sbworker;Password=...;Encrypt=false\"")]
    Emulator(EmulatorArgs),
    /// Install the broker scripts into a database (idempotent: re-running changes nothing).
    #[command(after_help = "Examples:\n  \
        sbworker install --postgres 'host=localhost user=payroll dbname=roster'\n  \
        sbworker install --postgres postgresql://payroll@db.example/roster\n  \
        sbworker install --postgres 'host=db user=dba dbname=payroll' --worker-role sbworker --payroll-role salaris\n  \
        sbworker install --postgres 'host=calc1 user=dba dbname=reken' --side calc   # then: sbworker link\n  \
        sbworker install --mssql 'Server=tcp:db,1433;User Id=dba;Password=...' --var Database=Payroll \\\n      \
        --var WorkerLogin=sbworker --var WorkerUser=sbworker --payroll-role salaris --housekeeping-role beheer\n\n\
        Two databases, two servers (docs/sqlserver.md, \"Two databases, two servers\"):\n  \
        sbworker install --mssql 'Server=tcp:rooster-db,1433;...' --side roster --var Database=Payroll \\\n      \
        --var WorkerLogin=sbworker --var WorkerUser=sbworker --sender-role planning\n  \
        sbworker install --mssql 'Server=tcp:reken-db,1433;...' --side calc --var Database=Rekenserver \\\n      \
        --var WorkerLogin=sbworker --var WorkerUser=sbworker\n\
        then the endpoint and routes of broker/mssql/optional/ on each instance.")]
    Install(InstallArgs),
    /// Check an installed database, as the worker's login: connectivity and TLS, the
    /// permissions the worker needs, the broker and its queues, the installed version,
    /// then one real round trip on a scratch key (cleaned up). One line per check; stops
    /// at the first failure, saying what to do; exit 0 only when all pass. With
    /// `--deep` (SQL Server), everything the T-SQL does, for a first real server.
    #[command(after_help = "Examples:\n  \
        sbworker selftest --postgres 'host=db user=sbworker dbname=payroll'\n  \
        sbworker selftest --mssql 'Server=tcp:db,1433;Database=Payroll;User Id=sbworker;Password=...' --json\n  \
        sbworker selftest --mssql \"$WORKER_CONN\" --deep --admin \"$DBA_CONN\"   # workers stopped, queues empty\n  \
        sbworker selftest --mssql \"$CALC_CONN\" --side calc     # a split deployment: each side on its own\n\n\
        --side roster|calc checks what that database must have, its route to the other side (sys.routes),\n\
        this instance's Service Broker endpoint and the transmission queue; the round trip needs both\n\
        sides in one database and is skipped there, saying so.\n\n\
        --deep runs, on the scratch key: a roster edit answered; export once, and leased with an ack;\n\
        recompute (dry run, one batch); a same-figures version not exported again and the next change\n\
        exported as a correction of what payroll has; explain; a dialog ended WITH CLEANUP found lost\n\
        and repaired by the sweep; a planner's Vraag received before an earlier recompute's; a retry's\n\
        RECEIVE of a group another session holds not waiting for it. It answers its own requests, so the\n\
        queues must be empty (workers stopped); the sweep step runs one ordinary sweep.\n\n\
        Exit status: 0 all checks passed, 1 a check failed, 2 bad arguments.")]
    Selftest(SelftestArgs),

    /// The installation at a glance: per queue enabled or not, depth, the oldest
    /// message, busy readers, recent retries, dead letters; the workers alive (their
    /// heartbeats); conversations by state; stale keys; the last sweep and export.
    #[command(after_help = "Examples:\n  \
        sbworker status --config /etc/sbworker/sbworker.toml\n  \
        sbworker status --config sbworker.toml --json | jq .queues\n  \
        sbworker status --config sbworker.toml --watch 5\n\n\
        The login needs a role that may read it (PostgreSQL: sbworker_monitor or\n\
        sbworker_housekeeping; SQL Server: sbworker_monitor_role or sbworker_operator_role).\n\
        The JSON shape is in docs/operations.md.\n\n\
        Exit status: 0 all is well; 1 something needs attention (a disabled queue, no worker\n\
        alive, stale keys); 69 the broker could not be asked; 78 a bad configuration.")]
    Status(StatusArgs),
    /// A web page for the operator and the payroll office: the overview of `status` with
    /// the last hour's throughput and latency, the dead letters (filtered, paged, shown
    /// decoded), the keys (searched, a key's log and versions explained), the runs and
    /// the action log; with --actions, replay and purge after signing in.
    #[command(after_help = "Examples:\n  \
        sbworker web --config /etc/sbworker/sbworker.toml\n  \
        sbworker web --config sbworker.toml --listen 127.0.0.1:8081 --refresh-seconds 5\n  \
        sbworker web --config sbworker.toml --actions\n\n\
        Open http://127.0.0.1:8080/: the overview (with the last hour's plots), /letters (the\n\
        dead letters), /sleutels and /sleutel (keys searched; a key's log and versions\n\
        explained), /runs (sweeps, recomputes, exports), /actions (the action log),\n\
        /status.json. Read-only unless --actions: then a person signs in with a database login\n\
        of their own and acts with exactly its rights (housekeeping may replay and purge);\n\
        every action is written to the action log with that login. With --actions every page\n\
        but the overview and /status.json is for signed-in people, and the page listens on a loopback address\n\
        only. Read-only beyond this machine (--listen 0.0.0.0:8080 --host NAME:8080) it serves\n\
        the overview only. The configuration's login needs a role that may read the status.\n\n\
        Exit status: 0 stopped by a signal; 2 --actions on an address that is not loopback,\n\
        or an unspecified address without --host; 69 the broker could not be asked at start\n\
        (or the login may not read the status) or the address not bound; 78 a bad\n\
        configuration.")]
    Web(WebArgs),
    /// The messages the worker set aside after failed attempts: list them, show one,
    /// send them again, or purge old ones.
    #[command(after_help = "Examples:\n  \
        sbworker dead-letter --config sbworker.toml list\n  \
        sbworker dead-letter --config sbworker.toml show 17\n  \
        sbworker dead-letter --config sbworker.toml replay 17 18\n  \
        sbworker dead-letter --config sbworker.toml replay --all --since 2026-12-01\n  \
        sbworker dead-letter --config sbworker.toml purge --before 2026-11-01\n\n\
        A replay sends the original body, byte for byte, on a new dialog from the service\n\
        that sent it; the entry stays, marked replayed (by whom, when, the new dialog).\n\
        The latest roster version still wins: an outdated request is answered as superseded.\n\n\
        Exit status: 0 done; 1 an entry could not be replayed or found; 69 the broker could\n\
        not be asked; 78 a bad configuration.")]
    DeadLetter(DeadLetterArgs),
    /// Join the two sides of a split PostgreSQL install: a route from the roster
    /// database to each calculation database and one back, carried by logical
    /// replication (a publication where each route starts, a subscription where it
    /// ends). Several calculation databases share the new dialogs in turn. Idempotent.
    #[command(after_help = "Examples:\n  \
        sbworker install --postgres 'host=db1 user=dba dbname=payroll' --side roster --roster\n  \
        sbworker install --postgres 'host=calc1 user=dba dbname=reken' --side calc\n  \
        sbworker link --roster 'host=db1 user=dba dbname=payroll' --calc 'host=calc1 user=dba dbname=reken'\n  \
        sbworker link --roster \"$ROSTER\" --calc \"$CALC1\" --calc \"$CALC2\"   # round-robin over two\n\n\
        Each server needs wal_level = logical, a free replication slot and WAL sender per route, and\n\
        the login a superuser (PostgreSQL 15; pg_create_subscription from 16). Each subscription\n\
        connects to the other side with the connection string given here, so each server must\n\
        reach the other with it (docs/deployment.md).\n\n\
        Exit status: 0 linked; 1 refused or failed (the reason is printed).")]
    Link(LinkArgs),
}

/// The flags of `sbworker calc`.
#[derive(clap::Args)]
pub struct CalcArgs {
    /// The Vraag XML (UTF-8 or UTF-16), or - for standard input.
    pub file: String,
    /// Explain on stderr which minutes fell into which rate, and why.
    #[arg(long)]
    pub explain: bool,
    /// Rate tables (TOML) instead of the built-in ones (data/cao.toml).
    #[arg(long, value_name = "FILE")]
    pub tables: Option<PathBuf>,
    /// Largest Vraag accepted, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = Limits::default().max_body_bytes)]
    pub max_body_bytes: usize,
}

/// The flags of `sbworker run`.
#[derive(clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub flags: ConfigFlags,
}

#[cfg(feature = "tools")]
/// The flags of `sbworker bench-worker`.
#[derive(clap::Args)]
pub struct BenchWorkerArgs {
    #[command(flatten)]
    pub flags: ConfigFlags,
}

/// The flags of `sbworker check-config`.
#[derive(clap::Args)]
pub struct CheckConfigArgs {
    #[command(flatten)]
    pub flags: ConfigFlags,
}

#[cfg(feature = "tools")]
/// The flags of `sbworker demo`.
#[derive(clap::Args)]
pub struct DemoArgs {
    /// Employees (one key each; the edits scale with it).
    #[arg(long, default_value_t = 200)]
    pub size: usize,
    /// Planner edits in the burst (default: three per employee).
    #[arg(long)]
    pub edits: Option<usize>,
    /// Most readers of the calculation queue.
    #[arg(long, default_value_t = 4)]
    pub readers: u32,
    /// Use this empty database (the broker and roster schema are installed into it)
    /// instead of a throwaway cluster.
    #[arg(long, value_name = "URL")]
    pub postgres: Option<String>,
    /// Seed of the generated roster and edits.
    #[arg(long, default_value_t = 2026)]
    pub seed: u64,
    /// Run the workers on the SQL Server transport (tiberius over TCP) through the
    /// Service Broker emulator, started in this process on the same broker.
    #[arg(long)]
    pub mssql: bool,
    /// Conversation reuse: a key's dialog carries its next versions and is ended
    /// after this many idle seconds (default: a dialog per request).
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u32).range(1..))]
    pub dialog_reuse_idle_seconds: Option<u32>,
    /// The seed's topology: the roster on a PostgreSQL server of its own and N
    /// calculation servers (each a throwaway cluster, wal_level=logical), joined by
    /// routes as `sbworker link` joins them; new dialogs take them in turn.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=8), conflicts_with_all = ["postgres", "mssql"])]
    pub split: Option<u32>,
}

/// The flags of `sbworker export`.
#[derive(clap::Args)]
pub struct ExportArgs {
    #[command(flatten)]
    pub database: HandoffDatabase,
    /// The period whose results to claim.
    #[arg(long, value_name = "ID", required_unless_present = "ack")]
    pub periode: Option<i32>,
    #[arg(long, value_enum, default_value = "csv")]
    pub format: FormatArg,
    #[arg(long, value_enum, default_value = "once")]
    pub mode: ModeArg,
    /// Lease of mode lease, in minutes.
    #[arg(long, default_value_t = 15.0)]
    pub lease_minutes: f64,
    /// Write here (atomically) instead of standard output.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Confirm a leased batch instead of claiming.
    #[arg(long, value_name = "BATCH_ID", conflicts_with = "periode")]
    pub ack: Option<uuid::Uuid>,
}

/// The flags of `sbworker sweep`.
#[derive(clap::Args)]
pub struct SweepArgs {
    #[command(flatten)]
    pub database: HandoffDatabase,
    /// Most keys sent per run (oldest change first).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(i64).range(1..))]
    pub fuse: i64,
    /// Keys per committed transaction.
    #[arg(long, default_value_t = 100, value_parser = clap::builder::TypedValueParser::map(clap::value_parser!(u64).range(1..), |v| v as usize))]
    pub batch: usize,
    /// Run-log rows, dead letters and the log rows of requests answered longer ago than
    /// this are deleted (each key's current Fouts stay).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(i32).range(1..))]
    pub retention_days: i32,
    /// Stored results' evidence older than this is deleted (the latest version of each
    /// key excepted; PostgreSQL). 84: the seven years Dutch tax law keeps payroll records.
    #[arg(long, default_value_t = 84, value_parser = clap::value_parser!(i32).range(1..))]
    pub evidence_retention_months: i32,
    /// Rows deleted per statement.
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(i64).range(1..))]
    pub delete_batch: i64,
}

/// The flags of `sbworker explain`.
#[derive(clap::Args)]
pub struct ExplainArgs {
    #[command(flatten)]
    pub database: HandoffDatabase,
    #[arg(long, value_name = "ID")]
    pub dienstverband: i32,
    #[arg(long, value_name = "ID")]
    pub periode: i32,
    /// The stored version (default: the latest).
    #[arg(long, value_name = "N")]
    pub versie: Option<i64>,
    /// Rate tables to explain with (TOML) instead of the built-in ones.
    #[arg(long, value_name = "FILE")]
    pub tables: Option<PathBuf>,
    /// One JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// The flags of `sbworker recompute`.
#[derive(clap::Args)]
pub struct RecomputeArgs {
    #[command(flatten)]
    pub database: HandoffDatabase,
    /// A period (repeatable).
    #[arg(long = "periode", value_name = "ID")]
    pub periodes: Vec<i32>,
    /// A CAO code (as in the roster's rooster.cao).
    #[arg(long, value_name = "CODE")]
    pub cao: Option<String>,
    /// Employees from this id.
    #[arg(long, value_name = "ID")]
    pub dienstverband_van: Option<i32>,
    /// Employees up to this id.
    #[arg(long, value_name = "ID")]
    pub dienstverband_tot: Option<i32>,
    /// A known key, DIENSTVERBAND:PERIODE (repeatable; not with the filters above).
    #[arg(long = "sleutel", value_name = "DV:P", value_parser = parse_key,
          conflicts_with_all = ["periodes", "cao", "dienstverband_van", "dienstverband_tot", "all"])]
    pub sleutels: Vec<(i32, i32)>,
    /// Every key (needed when no filter is given).
    #[arg(long)]
    pub all: bool,
    /// Start after this key, DIENSTVERBAND:PERIODE (where a run stopped at its fuse).
    #[arg(long, value_name = "DV:P", value_parser = parse_key)]
    pub after: Option<(i32, i32)>,
    /// Keys per committed transaction (1 to 100,000).
    #[arg(long, default_value_t = 100, value_parser = clap::builder::TypedValueParser::map(clap::value_parser!(u64).range(1..=100_000), |v| v as usize))]
    pub batch: usize,
    /// Most keys per run (1 to 1,000,000,000).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(i64).range(1..=1_000_000_000))]
    pub fuse: i64,
    /// Count the keys, change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

#[cfg(feature = "tools")]
/// The flags of `sbworker bench`.
#[derive(clap::Args)]
pub struct BenchArgs {
    /// Every part at a tiny size (a check that the bench works, not a measurement).
    #[arg(long)]
    pub quick: bool,
    /// Where the report goes.
    #[arg(long, value_name = "DIR", default_value = "bench-report")]
    pub out: std::path::PathBuf,
    /// Repetitions (default 3; 1 with --quick).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub reps: Option<u64>,
    /// Conversation groups of the headline and the burn-down (default 1000).
    #[arg(long, value_parser = clap::value_parser!(i32).range(1..))]
    pub groups: Option<i32>,
    /// In-order messages per group (default 100).
    #[arg(long, value_parser = clap::value_parser!(i32).range(1..))]
    pub per_group: Option<i32>,
    /// Leave out the peers installed from registries (graphile-worker with npm, River
    /// built with cargo).
    #[arg(long)]
    pub skip_peers: bool,
    /// Seconds each open-loop rate runs after its warm-up (default 60).
    #[arg(long, value_name = "SECONDS")]
    pub open_loop_seconds: Option<f64>,
    /// The open loop's arrival rates, messages per second (comma-separated; default
    /// 200,1000,2000).
    #[arg(long, value_delimiter = ',', value_name = "RATES", value_parser = clap::value_parser!(u32).range(1..))]
    pub open_loop_rates: Vec<u32>,
    /// Seconds the bloat workload runs with xmin pinned (default 180).
    #[arg(long, value_name = "SECONDS")]
    pub bloat_seconds: Option<f64>,
    /// The pipeline's sbworker calculation readers take up to this many conversation
    /// groups per transaction (the calculation queue's `groups_per_transaction`; default
    /// 1): an A/B of it. The collector's readers take up to 4 either way.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub groups_per_transaction: Option<u32>,
    /// The pipeline with conversation reuse: a key's dialog carries its next
    /// versions and ends after this many idle seconds (PostgreSQL broker; default: a
    /// dialog per request): an A/B of it.
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u32).range(1..))]
    pub dialog_reuse_idle_seconds: Option<u32>,
    /// The pipeline's reader counts, a run each (comma-separated; default 1,2,4,8; the
    /// open loop runs when 4 is among them).
    #[arg(long, value_delimiter = ',', value_name = "READERS", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub pipeline_readers: Vec<u32>,
    /// Employees of the pipeline's roster (default 400; three edits each): a larger
    /// run for an A/B that needs less spread.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=100000))]
    pub pipeline_employees: Option<u64>,
    /// Only these parts (comma-separated: headline, burn-down, poison, bloat, open-loop,
    /// pipeline, split, engine); the calibration runs in every repetition. `--parts headline`
    /// is an A/B of a change in minutes.
    #[arg(long, value_delimiter = ',', value_name = "PARTS", value_parser = crate::bench::Part::from_key)]
    pub parts: Vec<crate::bench::Part>,
    /// Only these contenders (comma-separated: sbworker-pg, sbworker-tds, graphile,
    /// graphile-localqueue, river, river-per-group, limit).
    #[arg(long, value_delimiter = ',', value_name = "CONTENDERS", value_parser = crate::bench::Contender::from_key)]
    pub contenders: Vec<crate::bench::Contender>,
    /// Measure nothing: write report.md and the plots again, into --out, from the
    /// results.json of an earlier run.
    #[arg(long, value_name = "RESULTS_JSON", conflicts_with_all = ["quick", "reps", "groups", "per_group", "skip_peers", "open_loop_seconds", "open_loop_rates", "bloat_seconds", "groups_per_transaction", "dialog_reuse_idle_seconds", "parts", "contenders"])]
    pub render: Option<std::path::PathBuf>,
}

#[cfg(feature = "tools")]
/// The flags of `sbworker emulator`.
#[derive(clap::Args)]
pub struct EmulatorArgs {
    /// Address to listen on.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:14330")]
    pub listen: std::net::SocketAddr,
    /// The PostgreSQL broker to run on (default: a throwaway cluster).
    #[arg(long, value_name = "URL")]
    pub postgres: Option<String>,
    /// The login clients must use.
    #[arg(long, default_value = "sbworker")]
    pub user: String,
    /// Its password.
    #[arg(long, env = "SBWORKER_EMULATOR_PASSWORD", hide_env_values = true, default_value = "sbworker")]
    pub password: String,
    /// Fault injection: every Nth RECEIVE that takes messages fails with deadlock 1205.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub fault_deadlock_every: Option<u64>,
    /// Fault injection: every Nth RECEIVE that takes messages drops its connection
    /// instead of answering (the transaction rolls back).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub fault_drop_every: Option<u64>,
    /// Fault injection: every Nth RECEIVE that takes messages fails with lock timeout 1222.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub fault_lock_timeout_every: Option<u64>,
    /// Fault injection: every Nth COMMIT of a transaction that received messages fails
    /// with deadlock 1205 (rolled back).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub fault_commit_deadlock_every: Option<u64>,
    /// Fault injection: every Nth SEND of a transaction that received messages (a
    /// reply) drops the connection before its COMMIT (the transaction rolls back).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub fault_send_drop_every: Option<u64>,
    /// Fault injection: a request still running after this many milliseconds (blocked
    /// on a lock, say) has its connection dropped, as a killed session does.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub fault_drop_blocked_after_ms: Option<u64>,
    /// Fault injection: every response waits this many milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pub fault_delay_ms: u64,
    /// Serve as this named instance: a SQL Server Browser on `--browser` answers for
    /// it with the TDS port (clients then connect with `Server=host\INSTANCE`).
    #[arg(long, value_name = "NAME", requires = "browser")]
    pub instance: Option<String>,
    /// The UDP address of that SQL Server Browser (SQL Server's is port 1434).
    #[arg(long, value_name = "ADDR", requires = "instance")]
    pub browser: Option<std::net::SocketAddr>,
    /// The TLS certificate (chain) for clients that ask for encryption, PEM; without
    /// it a self-signed one for localhost and 127.0.0.1 is made at start and printed.
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// Its private key, PEM.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,
}

/// The flags of `sbworker install`.
#[derive(clap::Args)]
pub struct InstallArgs {
    /// A PostgreSQL connection string (URL or key=value form).
    #[arg(long, value_name = "URL", required_unless_present = "mssql", conflicts_with = "mssql")]
    pub postgres: Option<String>,
    /// Also install the roster schema and its triggers (PostgreSQL: 004 and 005).
    #[arg(long)]
    pub roster: bool,
    /// A SQL Server ADO.NET connection string: runs broker/mssql/NN_*.sql in the order of their numbers.
    #[arg(long, value_name = "CONN")]
    pub mssql: Option<String>,
    /// A sqlcmd variable of the SQL Server scripts (Database, WorkerLogin, WorkerUser).
    #[arg(long = "var", value_name = "NAME=VALUE", value_parser = parse_var)]
    pub vars: Vec<(String, String)>,
    /// Which database this is: `both` (the default: the whole pipeline in one
    /// database), `roster` (the roster, its triggers, the collector's DataService,
    /// results, hand-off) or `calc` (the calculation's RekenService, its queue and
    /// bookkeeping). SQL Server: the scripts' sqlcmd variable Side. PostgreSQL: kept
    /// by the database, which stays the side it was first installed as; join the
    /// sides with `sbworker link` (docs/deployment.md).
    #[arg(long, value_name = "SIDE")]
    pub side: Option<crate::transport::Side>,
    /// Replace the roster senders even while a live calculation worker reads an older
    /// Vraag contract (refused otherwise: upgrade the workers first, docs/deployment.md).
    #[arg(long)]
    pub allow_older_workers: bool,
    #[command(flatten)]
    pub roles: InstallRoles,
}

/// The flags of `sbworker selftest`.
#[derive(clap::Args)]
pub struct SelftestArgs {
    /// A PostgreSQL connection string (URL or key=value form), as the worker uses.
    #[arg(
        long,
        value_name = "URL",
        env = "SBWORKER_SELFTEST_POSTGRES",
        hide_env_values = true,
        required_unless_present = "mssql",
        conflicts_with = "mssql"
    )]
    pub postgres: Option<String>,
    /// A SQL Server ADO.NET connection string, as the worker uses (Database= included).
    #[arg(long, value_name = "CONN", env = "SBWORKER_SELFTEST_MSSQL", hide_env_values = true)]
    pub mssql: Option<String>,
    /// Write the report as JSON (backend, passed, checks: name, status, detail,
    /// error_number, error_text, fix).
    #[arg(long)]
    pub json: bool,
    /// After the checks, every step of the T-SQL on the scratch key (SQL Server only):
    /// recompute, export, the correction rule, explain, a lost dialog repaired, the
    /// planner's priority, a held group. Needs the queues empty (workers stopped).
    #[arg(long, requires = "mssql", conflicts_with = "postgres")]
    pub deep: bool,
    /// The connection string for --deep's recompute, export, evidence and sweep: a
    /// login with the housekeeping and payroll roles, or the owner (default: --mssql's).
    #[arg(long, value_name = "CONN", env = "SBWORKER_SELFTEST_ADMIN", hide_env_values = true, requires = "deep")]
    pub admin: Option<String>,
    /// SQL Server: which database of the deployment this is, as installed (`sbworker
    /// install --side`): both (default), roster or calc.
    #[arg(long, value_name = "SIDE", requires = "mssql", conflicts_with_all = ["deep", "postgres"])]
    pub side: Option<crate::broker::mssql::Side>,
}

/// The flags of `sbworker status`.
#[derive(clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub flags: ConfigFlags,
    /// Print the status document as JSON (for scripts and monitoring).
    #[arg(long)]
    pub json: bool,
    /// Show the status again every SECONDS until interrupted.
    #[arg(long, value_name = "SECONDS")]
    pub watch: Option<u64>,
    #[command(flatten)]
    pub thresholds: ThresholdFlags,
}

/// What the status counts as stale, recent and silent (`sbworker status`, `sbworker web`).
#[derive(clap::Args, Clone, Copy)]
pub struct ThresholdFlags {
    /// A key is stale when its roster changed more than this many minutes ago and its
    /// stored result is older.
    #[arg(long, value_name = "MINUTES", default_value_t = 60)]
    pub stale_minutes: i32,
    /// Retries within this many minutes count as recent.
    #[arg(long, value_name = "MINUTES", default_value_t = 10)]
    pub recent_minutes: i32,
    /// A worker silent for longer than this is not alive (default: three of its own
    /// heartbeat intervals).
    #[arg(long, value_name = "SECONDS")]
    pub silent_seconds: Option<u64>,
}

impl ThresholdFlags {
    /// The thresholds of what needs attention.
    pub fn thresholds(&self) -> crate::ops::status::Thresholds {
        crate::ops::status::Thresholds {
            worker_silent_seconds: self.silent_seconds.map(|s| s as f64),
            stale_minutes: self.stale_minutes,
        }
    }
}

/// The flags of `sbworker web`.
#[derive(clap::Args)]
pub struct WebArgs {
    #[command(flatten)]
    pub flags: ConfigFlags,
    /// The address to listen on (localhost by default; with --actions a loopback
    /// address only: the page serves plain HTTP).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub listen: std::net::SocketAddr,
    /// The overview reloads itself every SECONDS.
    #[arg(long, value_name = "SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=3600))]
    pub refresh_seconds: u32,
    /// A `Host` the page answers to besides its listen address (NAME:PORT as the browser
    /// writes it, e.g. payroll-box:8080); repeatable. Needed with an unspecified listen
    /// address (`0.0.0.0`, `[::]`): every other `Host` is refused, against DNS rebinding.
    #[arg(long = "host", value_name = "NAME:PORT")]
    pub hosts: Vec<String>,
    /// Rate tables to explain a key's versions with (TOML) instead of the built-in ones.
    #[arg(long, value_name = "FILE")]
    pub tables: Option<std::path::PathBuf>,
    /// Let a person signed in with a database login of their own replay and purge dead
    /// letters (with that login's rights; each action is written to the action log).
    /// Without it the page is read-only.
    #[arg(long)]
    pub actions: bool,
    #[command(flatten)]
    pub thresholds: ThresholdFlags,
}

/// The flags of `sbworker dead-letter`.
#[derive(clap::Args)]
pub struct DeadLetterArgs {
    #[command(flatten)]
    pub flags: ConfigFlags,
    #[command(subcommand)]
    pub action: DeadLetterAction,
}

/// The flags of `sbworker link`.
#[derive(clap::Args)]
pub struct LinkArgs {
    /// The roster side's database (installed with --side roster).
    #[arg(long, value_name = "URL")]
    pub roster: String,
    /// A calculation database (installed with --side calc); give it once per database.
    #[arg(long, value_name = "URL", required = true)]
    pub calc: Vec<String>,
}

impl Command {
    /// The subcommand's name as typed (`dead-letter`), for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Calc(_) => "calc",
            Command::Run(_) => "run",
            Command::CheckConfig(_) => "check-config",
            Command::Export(_) => "export",
            Command::Sweep(_) => "sweep",
            Command::Explain(_) => "explain",
            Command::Recompute(_) => "recompute",
            Command::Install(_) => "install",
            Command::Link(_) => "link",
            Command::Selftest(_) => "selftest",
            Command::Status(_) => "status",
            Command::Web(_) => "web",
            Command::DeadLetter(_) => "dead-letter",
            #[cfg(feature = "tools")]
            Command::BenchWorker(_) => "bench-worker",
            #[cfg(feature = "tools")]
            Command::Demo(_) => "demo",
            #[cfg(feature = "tools")]
            Command::Bench(_) => "bench",
            #[cfg(feature = "tools")]
            Command::Emulator(_) => "emulator",
        }
    }
}

#[derive(Subcommand)]
pub enum DeadLetterAction {
    /// Id, queue, key, reason, attempts and when, newest first.
    List {
        /// Only those diverted at or after this time (2026-12-01 or 2026-12-01T08:00:00Z).
        #[arg(long, value_name = "TIME")]
        since: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: i32,
        /// As JSON lines.
        #[arg(long)]
        json: bool,
    },
    /// One entry: where it came from, the reason, and the body pretty-printed.
    Show { id: i64 },
    /// Send entries again on new dialogs.
    Replay {
        /// The entries' ids.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        ids: Vec<i64>,
        /// Every entry not replayed yet (with --since: diverted at or after it).
        #[arg(long)]
        all: bool,
        #[arg(long, value_name = "TIME", requires = "all")]
        since: Option<String>,
        /// The roster database of a split PostgreSQL install, for a Vraag diverted on its
        /// calculation side (the configuration's database): its key is sent again from
        /// there, at its current version.
        #[arg(long, value_name = "URL")]
        roster: Option<String>,
    },
    /// Delete the entries diverted before a date, in batches.
    Purge {
        /// 2026-11-01 or 2026-11-01T00:00:00Z.
        #[arg(long, value_name = "TIME")]
        before: String,
        #[arg(long, default_value_t = 1000)]
        batch: i32,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum FormatArg {
    Csv,
    Json,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum ModeArg {
    Once,
    Lease,
}

impl From<FormatArg> for crate::cli::handoff::Format {
    fn from(f: FormatArg) -> Self {
        match f {
            FormatArg::Csv => Self::Csv,
            FormatArg::Json => Self::Json,
        }
    }
}

impl ModeArg {
    /// The claim's mode, a lease lasting `lease_minutes`.
    pub fn with(self, lease_minutes: f64) -> crate::handoff::export::Mode {
        match self {
            ModeArg::Once => crate::handoff::export::Mode::Once,
            ModeArg::Lease => crate::handoff::export::Mode::Lease { seconds: lease_minutes * 60.0 },
        }
    }
}

/// A key written DIENSTVERBAND:PERIODE.
fn parse_key(s: &str) -> Result<(i32, i32), String> {
    let (dv, p) = s.split_once(':').ok_or_else(|| format!("'{s}' is not DIENSTVERBAND:PERIODE"))?;
    let n = |t: &str| t.trim().parse::<i32>().map_err(|_| format!("'{t}' in '{s}' is not a number"));
    Ok((n(dv)?, n(p)?))
}

/// The database of `sbworker export` and `sbworker sweep`: PostgreSQL, or SQL Server
/// (through `Rekenserver.export_claim`, `export_ack` and `sweep`).
#[derive(clap::Args)]
pub struct HandoffDatabase {
    /// PostgreSQL connection string.
    #[arg(
        long,
        value_name = "URL",
        env = "SBWORKER__BROKER__CONNECTION",
        hide_env_values = true,
        required_unless_present = "mssql"
    )]
    pub postgres: Option<String>,
    /// SQL Server ADO.NET connection string (Database= included).
    #[arg(long, value_name = "CONN", env = "SBWORKER_HANDOFF_MSSQL", hide_env_values = true)]
    pub mssql: Option<String>,
}

impl HandoffDatabase {
    /// The back end given; both (a flag, or a variable of the environment) is refused,
    /// saying where each can come from, rather than one silently taken.
    pub fn target(self) -> Result<crate::config::BrokerConfig, String> {
        use crate::config::{BrokerConfig, BrokerKind};
        match (self.mssql, self.postgres) {
            (Some(connection), None) => Ok(BrokerConfig { kind: BrokerKind::Mssql, connection }),
            (None, Some(connection)) => Ok(BrokerConfig { kind: BrokerKind::Postgres, connection }),
            (Some(_), Some(_)) => {
                Err("both a PostgreSQL database (--postgres, or SBWORKER__BROKER__CONNECTION in the \
                                       environment) and a SQL Server one (--mssql, or SBWORKER_HANDOFF_MSSQL) are \
                                       given: give one"
                    .into())
            }
            (None, None) => Err("give --postgres URL or --mssql CONN".into()),
        }
    }
}

/// The configuration file and the flags for its common keys. Global: accepted after a
/// subcommand's own subcommand too (`sbworker dead-letter list --config F`).
#[derive(clap::Args)]
pub struct ConfigFlags {
    /// The TOML configuration file.
    #[arg(long, value_name = "FILE", global = true)]
    pub config: Option<PathBuf>,
    /// The broker's connection string (broker.connection).
    #[arg(long, value_name = "CONN", global = true)]
    pub connection: Option<String>,
    /// Serve /metrics, /healthz and /readyz on this address (http.listen).
    #[arg(long, value_name = "ADDR", global = true)]
    pub metrics_listen: Option<String>,
    /// text or json (log.format).
    #[arg(long, value_name = "FORMAT", global = true)]
    pub log_format: Option<String>,
    /// A tracing filter such as info or sbworker=debug (log.level).
    #[arg(long, value_name = "FILTER", global = true)]
    pub log_level: Option<String>,
}

impl ConfigFlags {
    /// The environment's `SBWORKER__…` overrides, then these flags'.
    fn overrides(&self) -> crate::config::Overrides {
        let mut o = crate::config::env_overrides(std::env::vars());
        let quoted = |v: &str| toml::Value::String(v.to_owned()).to_string();
        for (key, v) in [
            ("broker.connection", &self.connection),
            ("http.listen", &self.metrics_listen),
            ("log.format", &self.log_format),
            ("log.level", &self.log_level),
        ] {
            if let Some(v) = v {
                o.push((key.to_owned(), quoted(v)));
            }
        }
        o
    }

    /// The effective configuration (file, environment, flags), checked, every queue's
    /// handler one of `known`.
    pub fn resolve(&self, known: &[&str]) -> Result<crate::config::Config, crate::config::ConfigError> {
        let config = crate::config::load(self.config.as_deref(), &self.overrides())?;
        config.check_handlers(known)?;
        crate::cli::run::check_owned_parts(&config)?;
        Ok(config)
    }

    /// [`ConfigFlags::resolve`], or the exit status for a bad configuration (after
    /// saying what is wrong).
    pub fn load(self, handlers: &[&str]) -> Result<crate::config::Config, ExitCode> {
        self.resolve(handlers).map_err(|e| {
            eprintln!("sbworker: configuration error: {e}");
            ExitCode::from(crate::cli::run::EXIT_CONFIG)
        })
    }
}

/// `NAME=VALUE`, as `--var` takes it.
fn parse_var(s: &str) -> Result<(String, String), String> {
    s.split_once('=').map(|(n, v)| (n.to_owned(), v.to_owned())).ok_or_else(|| format!("'{s}' is not NAME=VALUE"))
}

/// PostgreSQL: existing logins to grant sbworker's roles (the install creates the roles;
/// each flag may be given more than once).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct InstallRoles {
    /// A login that runs `sbworker run`: gets sbworker_worker (SQL Server: its user joins sbworker_role).
    #[arg(long = "worker-role", value_name = "LOGIN")]
    pub worker: Vec<String>,
    /// A login that sends requests (the roster's editors, whose triggers send): gets sbworker_sender
    /// (SQL Server: sbworker_sender_role).
    #[arg(long = "sender-role", value_name = "LOGIN")]
    pub sender: Vec<String>,
    /// A login that runs `sbworker export`: gets sbworker_payroll (SQL Server: sbworker_payroll_role).
    #[arg(long = "payroll-role", value_name = "LOGIN")]
    pub payroll: Vec<String>,
    /// A login that runs `sbworker sweep` and `sbworker dead-letter`: gets sbworker_housekeeping
    /// (SQL Server: sbworker_housekeeping_role).
    #[arg(long = "housekeeping-role", value_name = "LOGIN")]
    pub housekeeping: Vec<String>,
    /// A login that only reads `sbworker status` (monitoring): gets sbworker_monitor
    /// (SQL Server: sbworker_monitor_role).
    #[arg(long = "monitor-role", value_name = "LOGIN")]
    pub monitor: Vec<String>,
}

impl InstallRoles {
    /// (group role, login) pairs to grant.
    pub fn grants(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        for (role, logins) in [
            ("sbworker_worker", &self.worker),
            ("sbworker_sender", &self.sender),
            ("sbworker_payroll", &self.payroll),
            ("sbworker_housekeeping", &self.housekeeping),
            ("sbworker_monitor", &self.monitor),
        ] {
            out.extend(logins.iter().map(|l| (role, l.clone())));
        }
        out
    }
}
