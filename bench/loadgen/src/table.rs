//! `fleet-loadgen table`: turns the JSON lines of several runs into one markdown table.
//!
//! Rows keep the order in which labels first appear. When a label ran several rounds, its row is
//! the round with the median req/s (the lower median for an even count) and the `rounds` column
//! lists every round's req/s, except the CPU column: the median of the rounds' own CPU per call
//! (a round's CPU and req/s do not rank the same, and one round's CPU spreads by 20% on a busy
//! machine), each round's figure listed in a second `rounds` column. The ratio column is req/s
//! relative to the baseline label's row.
//!
//! `--versus TARGET` (bench/run.sh's saturation shapes) renders instead a row per label with
//! three ratios to the row of target TARGET (each line's `target`) in the same shape (`shape`,
//! sessions x connections): req/s, p99 and server CPU per call, and the server's busy share of
//! one core (its CPU time over the measured window), which says whether the server, not the
//! generator, was the limit.

use std::process::ExitCode;

use serde_json::Value;

pub fn main(args: Vec<String>) -> ExitCode {
    const USAGE: &str =
        "usage: fleet-loadgen table [--baseline LABEL | --versus TARGET] RESULTS.jsonl";
    let mut baseline: Option<String> = None;
    let mut versus: Option<String> = None;
    let mut file: Option<String> = None;
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--baseline" => baseline = it.next(),
            "--versus" => versus = it.next(),
            _ if file.is_none() => file = Some(a),
            _ => {
                eprintln!("{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    let Some(file) = file else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let text = match std::fs::read_to_string(&file) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("fleet-loadgen table: {file}: {e}");
            return ExitCode::FAILURE;
        }
    };
    match versus {
        Some(target) => print!("{}", render_versus(&text, &target)),
        None => print!("{}", render(&text, baseline.as_deref())),
    }
    ExitCode::SUCCESS
}

fn num(v: &Value, k: &str) -> f64 {
    v.get(k).and_then(Value::as_f64).unwrap_or(0.0)
}

/// One label's row: the round with the median req/s, every round's req/s, and every round's
/// server CPU per call (rounds that measured it).
struct Row {
    label: String,
    median: Value,
    all: Vec<f64>,
    cpu: Vec<f64>,
    /// Each round's server CPU seconds per second measured (1.0: one core always busy).
    busy: Vec<f64>,
}

/// A round's server CPU per answered call, in µs, when the round measured it.
fn cpu_per_call(v: &Value) -> Option<f64> {
    let ok = num(v, "requests") - num(v, "errors");
    let cpu = v.get("server_cpu_s").and_then(Value::as_f64)?;
    (ok > 0.0).then(|| 1e6 * cpu / ok)
}

/// The median (the mean of the middle two for an even count), `None` for no figure.
fn median_of(xs: &[f64]) -> Option<f64> {
    let mut xs = xs.to_vec();
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(xs[n / 2]),
        _ => Some((xs[n / 2 - 1] + xs[n / 2]) / 2.0),
    }
}

/// The rounds of each label, in the order labels first appear; lines that are not JSON objects
/// with a `label` are skipped.
fn rows_of(jsonl: &str) -> Vec<Row> {
    let mut groups: Vec<(String, Vec<Value>)> = Vec::new();
    for line in jsonl.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let Some(label) = v.get("label").and_then(Value::as_str).map(str::to_owned) else {
            continue;
        };
        match groups.iter_mut().find(|(l, _)| *l == label) {
            Some((_, runs)) => runs.push(v),
            None => groups.push((label, vec![v])),
        }
    }
    groups
        .into_iter()
        .map(|(label, mut runs)| {
            let all: Vec<f64> = runs.iter().map(|r| num(r, "rps")).collect();
            let cpu: Vec<f64> = runs.iter().filter_map(cpu_per_call).collect();
            let busy: Vec<f64> = runs
                .iter()
                .filter_map(|r| {
                    let cpu = r.get("server_cpu_s").and_then(Value::as_f64)?;
                    let d = num(r, "duration_s");
                    (d > 0.0).then(|| cpu / d)
                })
                .collect();
            runs.sort_by(|a, b| num(a, "rps").total_cmp(&num(b, "rps")));
            let median = runs.swap_remove((runs.len() - 1) / 2);
            Row {
                label,
                median,
                all,
                cpu,
                busy,
            }
        })
        .collect()
}

fn text_of<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or_default()
}

/// `{a / b}x`, or `n/a` without a base.
fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
        _ => "n/a".into(),
    }
}

/// The saturation table (`--versus TARGET`): rows grouped by shape, each with its ratios to the
/// row of `target` in the same shape.
pub fn render_versus(jsonl: &str, target: &str) -> String {
    let rows = rows_of(jsonl);
    let mut shapes: Vec<&str> = Vec::new();
    for r in &rows {
        let shape = text_of(&r.median, "shape");
        if !shapes.contains(&shape) {
            shapes.push(shape);
        }
    }
    let mut out = format!(
        "| shape | server | req/s | vs {target} | p50 ms | p99 ms | vs {target} | server CPU µs/call | vs {target} | server busy (one core) | errors | rounds (req/s) | rounds (µs/call) |\n\
         |---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|---|\n"
    );
    for shape in shapes {
        let in_shape = || {
            rows.iter()
                .filter(move |r| text_of(&r.median, "shape") == shape)
        };
        let base = in_shape().find(|r| text_of(&r.median, "target") == target);
        let base_rps = base.map(|b| num(&b.median, "rps"));
        let base_p99 = base.map(|b| num(&b.median, "p99_ms"));
        let base_cpu = base.and_then(|b| median_of(&b.cpu));
        for r in in_shape() {
            let v = &r.median;
            let cpu = median_of(&r.cpu);
            let busy = median_of(&r.busy).map_or("n/a".into(), |b| format!("{:.0}%", 100.0 * b));
            let rps = num(v, "rps");
            let p99 = num(v, "p99_ms");
            let list: Vec<String> = r.all.iter().map(|x| format!("{x:.0}")).collect();
            let cpus: Vec<String> = r.cpu.iter().map(|c| format!("{c:.1}")).collect();
            out.push_str(&format!(
                "| {shape} | {} | {rps:.0} | {} | {:.2} | {p99:.2} | {} | {} | {} | {busy} | {} | {} | {} |\n",
                r.label,
                ratio(Some(rps), base_rps),
                num(v, "p50_ms"),
                ratio(Some(p99), base_p99),
                cpu.map_or("n/a".into(), |c| format!("{c:.1}")),
                ratio(cpu, base_cpu),
                num(v, "errors"),
                list.join(", "),
                cpus.join(", "),
            ));
        }
    }
    out
}

/// Renders the table; lines that are not JSON objects with a `label` are skipped.
pub fn render(jsonl: &str, baseline: Option<&str>) -> String {
    let rows = rows_of(jsonl);
    let base_rps = baseline
        .and_then(|b| rows.iter().find(|r| r.label == b))
        .map(|r| num(&r.median, "rps"))
        .filter(|r| *r > 0.0);
    let multi = rows.iter().any(|r| r.all.len() > 1);

    let mut out = String::new();
    out.push_str("| server | sessions | requests | errors | req/s | vs rmcp | p50 ms | p90 ms | p99 ms | max ms | RSS MiB | server CPU µs/call |");
    if multi {
        out.push_str(" rounds (req/s) | rounds (µs/call) |");
    }
    out.push('\n');
    out.push_str("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
    if multi {
        out.push_str("---|---|");
    }
    out.push('\n');
    for Row {
        label,
        median: v,
        all,
        cpu,
        ..
    } in &rows
    {
        let rps = num(v, "rps");
        let ratio = match base_rps {
            Some(b) => format!("{:.2}x", rps / b),
            None => "n/a".into(),
        };
        let rss = match v.get("rss_kib").and_then(Value::as_f64) {
            Some(k) => format!("{:.1}", k / 1024.0),
            None => "n/a".into(),
        };
        let cpu_median = match median_of(cpu) {
            Some(c) => format!("{c:.1}"),
            None => "n/a".into(),
        };
        // `1x32`: one session, 32 calls in flight at once on 32 connections.
        let sessions = match num(v, "connections") {
            c if c > 1.0 => format!("{}x{c}", num(v, "sessions")),
            _ => num(v, "sessions").to_string(),
        };
        out.push_str(&format!(
            "| {label} | {sessions} | {} | {} | {rps:.0} | {ratio} | {:.2} | {:.2} | {:.2} | {:.2} | {rss} | {cpu_median} |",
            num(v, "requests"),
            num(v, "errors"),
            num(v, "p50_ms"),
            num(v, "p90_ms"),
            num(v, "p99_ms"),
            num(v, "max_ms"),
        ));
        if multi {
            let list: Vec<String> = all.iter().map(|r| format!("{r:.0}")).collect();
            let cpus: Vec<String> = cpu.iter().map(|c| format!("{c:.1}")).collect();
            out.push_str(&format!(" {} | {} |", list.join(", "), cpus.join(", ")));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{render, render_versus};

    #[test]
    fn cpu_is_the_median_of_the_rounds_own_figures() {
        // Round req/s 100, 200, 300 with CPU per call 30, 10, 20 µs: the median-req/s round has
        // 10, the median of the rounds' CPU is 20.
        let jsonl = r#"{"label":"a","sessions":1,"requests":1000,"errors":0,"rps":100.0,"server_cpu_s":0.03}
{"label":"a","sessions":1,"requests":1000,"errors":0,"rps":200.0,"server_cpu_s":0.01}
{"label":"a","sessions":1,"requests":1000,"errors":0,"rps":300.0,"server_cpu_s":0.02}"#;
        let t = render(jsonl, None);
        let row = t.lines().nth(2).unwrap_or_default();
        assert!(
            row.ends_with(" | 20.0 | 100, 200, 300 | 30.0, 10.0, 20.0 |"),
            "{t}"
        );
    }

    #[test]
    fn versus_compares_each_shape_with_its_own_baseline() {
        // Two shapes, hyper and fleetmcp in each, two rounds of fleetmcp in 1x32.
        let jsonl = r#"{"label":"h, 1x32","target":"hyper","shape":"1x32","duration_s":2,"requests":200000,"errors":0,"rps":100000,"p50_ms":0.2,"p99_ms":1.0,"server_cpu_s":1.6}
{"label":"f, 1x32","target":"fleetmcp","shape":"1x32","duration_s":2,"requests":150000,"errors":0,"rps":75000,"p50_ms":0.3,"p99_ms":1.5,"server_cpu_s":1.8}
{"label":"h, 64x64","target":"hyper","shape":"64x64","duration_s":1,"requests":50000,"errors":0,"rps":50000,"p50_ms":1,"p99_ms":2.0,"server_cpu_s":0.5}
{"label":"f, 1x32","target":"fleetmcp","shape":"1x32","duration_s":2,"requests":100000,"errors":0,"rps":50000,"p50_ms":0.4,"p99_ms":3.0,"server_cpu_s":2.0}
{"label":"f, 64x64","target":"fleetmcp","shape":"64x64","duration_s":1,"requests":25000,"errors":5,"rps":24995,"p50_ms":2,"p99_ms":4.0,"server_cpu_s":0.5}"#;
        let t = render_versus(jsonl, "hyper");
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 6, "{t}");
        assert!(lines[0].contains("| vs hyper |"), "{t}");
        // hyper 1x32: 1.6 s / 200,000 calls = 8 µs, 80% of a core.
        assert_eq!(
            lines[2],
            "| 1x32 | h, 1x32 | 100000 | 1.00x | 0.20 | 1.00 | 1.00x | 8.0 | 1.00x | 80% | 0 | 100000 | 8.0 |",
            "{t}"
        );
        // fleetmcp 1x32: the lower-median round (50,000 req/s, p99 3.0); CPU the median of
        // 12 and 20 µs = 16 (2x hyper's); busy the median of 90% and 100%.
        assert_eq!(
            lines[3],
            "| 1x32 | f, 1x32 | 50000 | 0.50x | 0.40 | 3.00 | 3.00x | 16.0 | 2.00x | 95% | 0 | 75000, 50000 | 12.0, 20.0 |",
            "{t}"
        );
        // 64x64 against hyper's 64x64 row, not its 1x32 one: 10 µs vs 20.0 (0.5 s / 24,995).
        let starts = [
            "| 64x64 | h, 64x64 | 50000 | 1.00x |",
            "| 64x64 | f, 64x64 | 24995 | 0.50x | 2.00 | 4.00 | 2.00x | 20.0 | 2.00x | 50% | 5 |",
        ];
        for (line, start) in lines[4..].iter().zip(starts) {
            assert!(line.starts_with(start), "{t}");
        }
    }

    #[test]
    fn median_round_and_ratio() {
        let jsonl = r#"{"label":"a","sessions":2,"requests":10,"errors":0,"rps":100.0,"p50_ms":1,"p90_ms":2,"p99_ms":3,"max_ms":4,"rss_kib":2048,"server_cpu_s":0.5}
{"label":"b","sessions":1,"connections":32,"requests":20,"errors":1,"rps":200.0,"p50_ms":1,"p90_ms":2,"p99_ms":3,"max_ms":4,"rss_kib":null}
{"label":"a","sessions":2,"requests":30,"errors":0,"rps":300.0,"p50_ms":1,"p90_ms":2,"p99_ms":3,"max_ms":4,"rss_kib":1024}
{"label":"a","sessions":2,"requests":50,"errors":0,"rps":500.0,"p50_ms":1,"p90_ms":2,"p99_ms":3,"max_ms":4,"rss_kib":1024}
not json"#;
        let t = render(jsonl, Some("b"));
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4, "{t}");
        assert!(
            lines[2].starts_with("| a | 2 | 30 | 0 | 300 | 1.50x |"),
            "{t}"
        );
        // CPU per call: the median of the rounds that measured it (0.5 s / 10 calls = 50000 µs;
        // the others measured none), not the median-req/s round's (which measured none).
        assert!(
            lines[2].ends_with(" | 50000.0 | 100, 300, 500 | 50000.0 |"),
            "{t}"
        );
        assert!(
            lines[3].starts_with("| b | 1x32 |")
                && lines[3].contains("| 200 | 1.00x |")
                && lines[3].contains("| n/a |"),
            "{t}"
        );
    }
}
