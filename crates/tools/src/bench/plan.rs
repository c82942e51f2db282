//! The bench's steps in the order it runs them, and its progress: which step runs, how
//! far the bench is, and an estimate of the time left. A step whose length its settings
//! fix (calibration, open loop, bloat, engine) counts that long; one that lasts as long
//! as the contender needs (headline, burn-down, poison, pipeline) counts as the steps of
//! its kind took so far (any kind's average before the first of its own). On a terminal
//! each step's line stays and the per-run lines under it are overwritten; otherwise all
//! are plain lines.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::time::Instant;

use crate::demo::progress::human;

/// One step of the bench.
#[derive(Debug, Clone)]
pub struct Step {
    pub kind: &'static str,
    pub label: String,
    /// Seconds it runs by its settings; `None` when that depends on the contender.
    pub known: Option<f64>,
}

impl Step {
    pub fn fixed(kind: &'static str, label: String, seconds: f64) -> Self {
        Self { kind, label, known: Some(seconds) }
    }

    pub fn open(kind: &'static str, label: String) -> Self {
        Self { kind, label, known: None }
    }
}

/// Counts the steps as they start and says where the bench is.
pub struct Tracker {
    steps: Vec<Step>,
    next: usize,
    started: Instant,
    current: Option<(usize, Instant)>,
    /// Per kind: seconds taken by the finished steps of that kind, and how many.
    taken: HashMap<&'static str, (f64, usize)>,
}

impl Tracker {
    pub fn new(steps: Vec<Step>) -> Self {
        Self { steps, next: 0, started: Instant::now(), current: None, taken: HashMap::new() }
    }

    pub fn total(&self) -> usize {
        self.steps.len()
    }

    /// How many steps have started.
    pub fn started(&self) -> usize {
        self.next
    }

    fn finish_current(&mut self) {
        if let Some((i, at)) = self.current.take() {
            let e = self.taken.entry(self.steps[i].kind).or_insert((0.0, 0));
            e.0 += at.elapsed().as_secs_f64();
            e.1 += 1;
        }
    }

    /// The expected length of step `i`, if anything is known yet.
    fn expected(&self, i: usize) -> Option<f64> {
        let s = &self.steps[i];
        if let Some(k) = s.known {
            return Some(k);
        }
        if let Some(&(secs, n)) = self.taken.get(s.kind) {
            return Some(secs / n as f64);
        }
        let (secs, n) = self
            .taken
            .iter()
            .filter(|(kind, _)| self.steps.iter().any(|x| x.kind == **kind && x.known.is_none()))
            .fold((0.0, 0), |(a, b), (_, &(s, n))| (a + s, b + n));
        (n > 0).then(|| secs / n as f64)
    }

    /// Seconds left after the step about to start begins, if every step can be guessed.
    pub fn left(&self) -> Option<f64> {
        (self.next..self.steps.len()).map(|i| self.expected(i)).sum()
    }

    /// The line for starting step `next` (without printing it).
    pub fn line(&self) -> String {
        let i = self.next.min(self.steps.len().saturating_sub(1));
        let label = self.steps.get(i).map_or("", |s| s.label.as_str());
        let left = match self.left() {
            Some(s) => format!("about {} left", human(s)),
            None => "time left: known after the first measured step".into(),
        };
        format!(
            "[{}/{}] {label} · {} elapsed · {left}",
            i + 1,
            self.steps.len(),
            human(self.started.elapsed().as_secs_f64())
        )
    }

    /// Starts the next step and says so on stderr.
    pub fn next(&mut self) {
        self.finish_current();
        if self.next >= self.steps.len() {
            return;
        }
        let line = self.line();
        self.current = Some((self.next, Instant::now()));
        self.next += 1;
        let mut err = std::io::stderr().lock();
        let _ = if err.is_terminal() { writeln!(err, "\r\x1b[2K{line}") } else { writeln!(err, "{line}") };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_time_left_adds_fixed_steps_and_what_open_steps_took() {
        let mut t = Tracker::new(vec![
            Step::fixed("calibration", "c".into(), 10.0),
            Step::open("headline", "h1".into()),
            Step::open("headline", "h2".into()),
            Step::open("pipeline", "p".into()),
            Step::fixed("engine", "e".into(), 3.0),
        ]);
        // Before anything open has run, nothing can be guessed.
        assert_eq!(t.left(), None);
        assert!(t.line().starts_with("[1/5] c · "), "{}", t.line());
        t.next();
        t.next();
        // One headline step has started; pretend the first took 20 s.
        t.finish_current();
        t.taken.insert("headline", (20.0, 1));
        t.current = None;
        // Left: h2 (20, as the headline took), p (20, the open steps' average), e (3).
        assert_eq!(t.left(), Some(43.0));
        assert!(t.line().contains("[3/5] h2"), "{}", t.line());
    }
}
