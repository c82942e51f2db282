//! The run log and the export batches, for the web page's runs (`/runs`): sweeps and
//! recomputes newest first, a recompute still running with its progress (its run-log row
//! is written after every batch), and the export batches claimed for payroll with how
//! many of their results were confirmed.

/// One run of the run log (a sweep's run row, or a recompute).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub id: i64,
    /// `run` (a sweep) or `herberekening` (a recompute).
    pub stap: String,
    pub start: String,
    /// None while it runs.
    pub eind: Option<String>,
    pub ms: Option<i32>,
    /// Keys looked at (a recompute: recomputed so far).
    pub kandidaten: Option<i32>,
    /// Vraags sent (so far).
    pub verzonden: Option<i32>,
    pub verwijderd: Option<i32>,
    /// The error or warning text (empty or none: clean).
    pub fout: Option<String>,
}

/// One export batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportBatch {
    pub batch: String,
    pub periode: i32,
    pub claimed_at: Option<String>,
    pub results: i64,
    pub confirmed: i64,
}
