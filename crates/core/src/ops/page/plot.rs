//! The overview's two plots of the last hour, drawn on the server as inline SVG (no
//! script, no outside asset): requests answered per minute (the part answered with a
//! Fout in red), and the time from a Vraag sent to its answer per minute (median and
//! 95th percentile). Each bar and point carries its numbers as a tooltip (`<title>`).

use std::fmt::Write;

use crate::ops::Rate;

/// How far back the plots go, in minutes.
pub const MINUTES: i32 = 60;

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 170.0;
const LEFT: f64 = 56.0;
const RIGHT: f64 = 10.0;
const TOP: f64 = 10.0;
const BOTTOM: f64 = 22.0;

/// The smallest of 1, 2 and 5 times a power of ten at or above `v` (at least 1).
fn nice_ceiling(v: f64) -> f64 {
    if v <= 1.0 {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * p).find(|c| *c >= v).unwrap_or(10.0 * p)
}

fn slot() -> f64 {
    (WIDTH - LEFT - RIGHT) / f64::from(MINUTES)
}

/// The left edge of minute `ago`'s slot (the current minute is the rightmost).
fn x_of(ago: i32) -> f64 {
    LEFT + f64::from(MINUTES - 1 - ago.clamp(0, MINUTES - 1)) * slot()
}

fn y_of(v: f64, max: f64) -> f64 {
    HEIGHT - BOTTOM - (v / max) * (HEIGHT - TOP - BOTTOM)
}

/// The frame: the axes, the top value with its unit, the time labels.
fn frame(o: &mut String, id: &str, label: &str, max: f64, unit: &str) {
    let _ = write!(
        o,
        "<svg id=\"{id}\" role=\"img\" aria-label=\"{label}\" width=\"{WIDTH}\" height=\"{HEIGHT}\" \
         viewBox=\"0 0 {WIDTH} {HEIGHT}\" xmlns=\"http://www.w3.org/2000/svg\" font-size=\"11\" \
         font-family=\"system-ui,sans-serif\"><title>{label}</title>\
         <line x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{b}\" stroke=\"#999\"/>\
         <line x1=\"{LEFT}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"#999\"/>\
         <line x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{r}\" y2=\"{TOP}\" stroke=\"#eee\"/>\
         <text x=\"{lx}\" y=\"{ty}\" text-anchor=\"end\">{max} {unit}</text>\
         <text x=\"{lx}\" y=\"{b}\" text-anchor=\"end\">0</text>\
         <text x=\"{LEFT}\" y=\"{tb}\">−{MINUTES} min</text>\
         <text x=\"{mid}\" y=\"{tb}\" text-anchor=\"middle\">−{half} min</text>\
         <text x=\"{r}\" y=\"{tb}\" text-anchor=\"end\">now</text>",
        b = HEIGHT - BOTTOM,
        r = WIDTH - RIGHT,
        lx = LEFT - 4.0,
        ty = TOP + 8.0,
        tb = HEIGHT - 6.0,
        mid = LEFT + (WIDTH - LEFT - RIGHT) / 2.0,
        half = MINUTES / 2,
    );
}

/// A note in the middle of an empty plot.
fn empty(o: &mut String, text: &str) {
    let _ = write!(
        o,
        "<text class=\"empty\" x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#777\">{text}</text>",
        LEFT + (WIDTH - LEFT - RIGHT) / 2.0,
        HEIGHT / 2.0
    );
}

/// Requests answered per minute: a bar per minute, its Fout part in red.
pub fn throughput(rates: &[Rate]) -> String {
    let rates: Vec<&Rate> = rates.iter().filter(|r| (0..MINUTES).contains(&r.minutes_ago)).collect();
    let max = nice_ceiling(rates.iter().map(|r| r.answered as f64).fold(0.0, f64::max));
    let mut o = String::new();
    frame(&mut o, "plot-throughput", "requests answered per minute, last hour", max, "/min");
    let w = (slot() - 1.0).max(1.0);
    for r in rates.iter().filter(|r| r.answered > 0) {
        let x = x_of(r.minutes_ago);
        let (top, base) = (y_of(r.answered as f64, max), HEIGHT - BOTTOM);
        let tip = format!("{} min ago: {} answered, {} with a Fout", r.minutes_ago, r.answered, r.failed);
        let _ = write!(
            o,
            "<rect class=\"bar\" x=\"{x:.1}\" y=\"{top:.1}\" width=\"{w:.1}\" height=\"{:.1}\" fill=\"#3b6fb6\"><title>{tip}</title></rect>",
            base - top
        );
        if r.failed > 0 {
            let ftop = y_of(r.failed as f64, max);
            let _ = write!(
                o,
                "<rect class=\"failed\" x=\"{x:.1}\" y=\"{ftop:.1}\" width=\"{w:.1}\" height=\"{:.1}\" fill=\"#b00020\"><title>{tip}</title></rect>",
                base - ftop
            );
        }
    }
    if !rates.iter().any(|r| r.answered > 0) {
        empty(&mut o, "no request answered in the last hour");
    }
    o.push_str("</svg>");
    o
}

/// The time from a Vraag sent to its answer per minute: the median (blue) and the 95th
/// percentile (orange), as lines through the minutes that had answers.
pub fn latency(rates: &[Rate]) -> String {
    let mut points: Vec<&Rate> =
        rates.iter().filter(|r| (0..MINUTES).contains(&r.minutes_ago) && r.p95_ms.is_some()).collect();
    points.sort_by_key(|r| std::cmp::Reverse(r.minutes_ago));
    let max = nice_ceiling(points.iter().filter_map(|r| r.p95_ms.max(r.p50_ms)).map(|v| v as f64).fold(0.0, f64::max));
    let mut o = String::new();
    frame(&mut o, "plot-latency", "time from a request sent to its answer, per minute, last hour", max, "ms");
    for (class, colour, pick) in
        [("p95", "#d9822b", (|r: &Rate| r.p95_ms) as fn(&Rate) -> Option<i64>), ("p50", "#3b6fb6", |r: &Rate| r.p50_ms)]
    {
        let xy: Vec<(f64, f64, i64, i32)> = points
            .iter()
            .filter_map(|r| {
                pick(r).map(|v| (x_of(r.minutes_ago) + slot() / 2.0, y_of(v as f64, max), v, r.minutes_ago))
            })
            .collect();
        if xy.len() > 1 {
            let line: Vec<String> = xy.iter().map(|(x, y, _, _)| format!("{x:.1},{y:.1}")).collect();
            let _ = write!(
                o,
                "<polyline class=\"{class}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\" points=\"{}\"/>",
                line.join(" ")
            );
        }
        for (x, y, v, ago) in &xy {
            let _ = write!(
                o,
                "<circle class=\"{class}\" cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"2.5\" fill=\"{colour}\"><title>{ago} min ago: {class} {v} ms</title></circle>"
            );
        }
    }
    if points.is_empty() {
        empty(&mut o, "no request answered in the last hour");
    }
    let _ = write!(
        o,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" fill=\"#3b6fb6\">median</text>\
         <text x=\"{}\" y=\"{}\" text-anchor=\"end\" fill=\"#d9822b\">95th percentile</text></svg>",
        WIDTH - RIGHT - 100.0,
        TOP + 10.0,
        WIDTH - RIGHT,
        TOP + 10.0
    );
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(ago: i32, answered: i64, failed: i64, p50: i64, p95: i64) -> Rate {
        Rate { minutes_ago: ago, answered, failed, p50_ms: Some(p50), p95_ms: Some(p95) }
    }

    #[test]
    fn scales_round_up_to_one_two_or_five() {
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(3.0), 5.0);
        assert_eq!(nice_ceiling(17.0), 20.0);
        assert_eq!(nice_ceiling(200.0), 200.0);
        assert_eq!(nice_ceiling(501.0), 1000.0);
    }

    #[test]
    fn a_bar_per_minute_with_answers_and_the_fout_part_apart() {
        let svg = throughput(&[rate(0, 40, 0, 5, 9), rate(5, 20, 3, 7, 30), rate(70, 99, 0, 1, 1)]);
        assert_eq!(svg.matches("class=\"bar\"").count(), 2, "minutes beyond the hour are left out: {svg}");
        assert_eq!(svg.matches("class=\"failed\"").count(), 1);
        assert!(svg.contains("50 /min"), "the scale: {svg}");
        assert!(svg.contains("5 min ago: 20 answered, 3 with a Fout"));
        // The current minute is the rightmost slot; the tallest bar reaches 40/50 of the height.
        let h = (HEIGHT - TOP - BOTTOM) * 40.0 / 50.0;
        assert!(svg.contains(&format!("height=\"{h:.1}\"")), "{svg}");
    }

    #[test]
    fn latency_lines_run_oldest_to_newest_and_an_empty_hour_says_so() {
        let svg = latency(&[rate(0, 1, 0, 10, 40), rate(2, 1, 0, 20, 80)]);
        assert_eq!(svg.matches("<circle class=\"p95\"").count(), 2);
        assert!(svg.contains("100 ms"), "{svg}");
        let line = svg.split("class=\"p50\"").nth(1).unwrap();
        let first_x: f64 = line.split("points=\"").nth(1).unwrap().split(',').next().unwrap().parse().unwrap();
        assert!(first_x < x_of(0), "the older minute is to the left");
        assert!(latency(&[]).contains("no request answered"));
        assert!(throughput(&[]).contains("no request answered"));
    }
}
