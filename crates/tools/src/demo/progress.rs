//! Durations as progress lines say them (`sbworker demo`, `sbworker bench`).

/// 42 s, 3 min, 1 h 05 min.
pub fn human(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    match s {
        0..=99 => format!("{s} s"),
        100..=3599 => format!("{} min", (s + 30) / 60),
        _ => format!("{} h {:02} min", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_a_person_would_say_them() {
        assert_eq!(human(42.4), "42 s");
        assert_eq!(human(181.0), "3 min");
        assert_eq!(human(3900.0), "1 h 05 min");
    }
}
