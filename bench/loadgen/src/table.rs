//! `fleet-loadgen table`: turns the JSON lines of several runs into one markdown table.
//!
//! Rows keep the order in which labels first appear. When a label ran several rounds, its row is
//! the round with the median req/s (the lower median for an even count) and the `rounds` column
//! lists every round's req/s. The ratio column is req/s relative to the baseline label's row.

use std::process::ExitCode;

use serde_json::Value;

pub fn main(args: Vec<String>) -> ExitCode {
    let mut baseline: Option<String> = None;
    let mut file: Option<String> = None;
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--baseline" => baseline = it.next(),
            _ if file.is_none() => file = Some(a),
            _ => {
                eprintln!("usage: fleet-loadgen table [--baseline LABEL] RESULTS.jsonl");
                return ExitCode::from(2);
            }
        }
    }
    let Some(file) = file else {
        eprintln!("usage: fleet-loadgen table [--baseline LABEL] RESULTS.jsonl");
        return ExitCode::from(2);
    };
    let text = match std::fs::read_to_string(&file) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("fleet-loadgen table: {file}: {e}");
            return ExitCode::FAILURE;
        }
    };
    print!("{}", render(&text, baseline.as_deref()));
    ExitCode::SUCCESS
}

fn num(v: &Value, k: &str) -> f64 {
    v.get(k).and_then(Value::as_f64).unwrap_or(0.0)
}

/// Renders the table; lines that are not JSON objects with a `label` are skipped.
pub fn render(jsonl: &str, baseline: Option<&str>) -> String {
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
    let rows: Vec<(String, Value, Vec<f64>)> = groups
        .into_iter()
        .map(|(label, mut runs)| {
            let all: Vec<f64> = runs.iter().map(|r| num(r, "rps")).collect();
            runs.sort_by(|a, b| num(a, "rps").total_cmp(&num(b, "rps")));
            let median = runs.swap_remove((runs.len() - 1) / 2);
            (label, median, all)
        })
        .collect();
    let base_rps = baseline
        .and_then(|b| rows.iter().find(|(l, _, _)| l == b))
        .map(|(_, v, _)| num(v, "rps"))
        .filter(|r| *r > 0.0);
    let multi = rows.iter().any(|(_, _, all)| all.len() > 1);

    let mut out = String::new();
    out.push_str("| server | sessions | requests | errors | req/s | vs rmcp | p50 ms | p90 ms | p99 ms | max ms | RSS MiB | server CPU µs/call |");
    if multi {
        out.push_str(" rounds (req/s) |");
    }
    out.push('\n');
    out.push_str("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
    if multi {
        out.push_str("---|");
    }
    out.push('\n');
    for (label, v, all) in &rows {
        let rps = num(v, "rps");
        let ratio = match base_rps {
            Some(b) => format!("{:.2}x", rps / b),
            None => "n/a".into(),
        };
        let rss = match v.get("rss_kib").and_then(Value::as_f64) {
            Some(k) => format!("{:.1}", k / 1024.0),
            None => "n/a".into(),
        };
        let ok = num(v, "requests") - num(v, "errors");
        let cpu = match v.get("server_cpu_s").and_then(Value::as_f64) {
            Some(c) if ok > 0.0 => format!("{:.0}", 1e6 * c / ok),
            _ => "n/a".into(),
        };
        // `1x32`: one session, 32 calls in flight at once on 32 connections.
        let sessions = match num(v, "connections") {
            c if c > 1.0 => format!("{}x{c}", num(v, "sessions")),
            _ => num(v, "sessions").to_string(),
        };
        out.push_str(&format!(
            "| {label} | {sessions} | {} | {} | {rps:.0} | {ratio} | {:.2} | {:.2} | {:.2} | {:.2} | {rss} | {cpu} |",
            num(v, "requests"),
            num(v, "errors"),
            num(v, "p50_ms"),
            num(v, "p90_ms"),
            num(v, "p99_ms"),
            num(v, "max_ms"),
        ));
        if multi {
            let list: Vec<String> = all.iter().map(|r| format!("{r:.0}")).collect();
            out.push_str(&format!(" {} |", list.join(", ")));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::render;

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
        assert!(lines[2].ends_with(" 100, 300, 500 |"), "{t}");
        assert!(
            lines[3].starts_with("| b | 1x32 |")
                && lines[3].contains("| 200 | 1.00x |")
                && lines[3].contains("| n/a |"),
            "{t}"
        );
    }
}
