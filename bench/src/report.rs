//! Where figures go: `bench/results/summary.json` (one JSON object shared by every benchmark, each writing
//! only its own keys) and the benchmark's page `bench/results/<page>.md` (one section per run between marker
//! comments; [`page_for`]). `bench/RESULTS.md` is the summary table over them, kept by hand.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// The bench folder of the source tree.
pub fn bench_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Merges `values` (an object) into summary.json under `key`.
pub fn merge_summary(key: &str, value: Value) -> anyhow::Result<()> {
    let path = bench_dir().join("results/summary.json");
    let mut root: Value = std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_else(|| serde_json::json!({}));
    if !root.is_object() {
        root = serde_json::json!({});
    }
    root[key] = value;
    std::fs::create_dir_all(path.parent().unwrap_or(Path::new(".")))?;
    std::fs::write(&path, serde_json::to_string_pretty(&root)? + "\n")?;
    Ok(())
}

/// The page of `bench/results/` that section `name` belongs to: one page per benchmark (the variants of a
/// surge scenario and the core's hold benchmarks share theirs). bench/results.py has the same rules.
pub fn page_for(name: &str) -> &str {
    const PAGES: [(&str, &str); 10] = [
        ("core-holds", "core-holds"),
        ("hold-vs-evalsha", "core-holds"),
        ("embedded-durable", "core-holds"),
        ("redis-wait", "core-holds"),
        ("surge-megasale", "surge-megasale"),
        ("surge-crashes", "surge-crashes"),
        ("surge-bots", "surge-bots"),
        ("rooms", "rooms"),
        ("nginx-auth", "nginx-compat"),
        ("nginx-openresty", "nginx-compat"),
    ];
    if name == "edge-static-vs-nginx" {
        return "edge-static";
    }
    PAGES.iter().find(|(prefix, _)| name.starts_with(prefix)).map_or(name, |(_, page)| page)
}

/// Replaces (or appends) the section `name` of its page (`bench/results/<page>.md`, [`page_for`]) with `body`.
pub fn write_section(name: &str, body: &str) -> anyhow::Result<()> {
    let page = page_for(name);
    let path = bench_dir().join(format!("results/{page}.md"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        format!("# {page}\n\nRuns of this benchmark, newest figures as each run wrote them; the summary is in bench/RESULTS.md.\n")
    });
    let begin = format!("<!-- begin:{name} -->");
    let end = format!("<!-- end:{name} -->");
    let section = format!("{begin}\n{}\n{end}", body.trim_end());
    let new = match (text.find(&begin), text.find(&end)) {
        (Some(a), Some(b)) if b > a => format!("{}{}{}", &text[..a], section, &text[b + end.len()..]),
        _ => format!("{}\n{}\n", text.trim_end(), section),
    };
    std::fs::create_dir_all(path.parent().unwrap_or(Path::new(".")))?;
    std::fs::write(&path, new)?;
    Ok(())
}

/// A line saying what machine produced a figure.
pub fn machine() -> String {
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| t.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string()))
        .unwrap_or_else(|| "unknown CPU".into());
    let date = time::OffsetDateTime::now_utc().date();
    // The box may be shared: the load when the figure was written says how much.
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .filter(|l| !l.is_empty())
        .map(|l| format!(", load average (1/5/15 min) at the end: {l}"))
        .unwrap_or_default();
    format!("{cpus} cores ({model}), {date}{load}")
}

/// Percentile of sorted microsecond samples, in ms.
pub fn percentile_ms(sorted_us: &[u32], p: f64) -> f64 {
    if sorted_us.is_empty() {
        return 0.0;
    }
    let i = ((sorted_us.len() as f64 - 1.0) * p).round() as usize;
    sorted_us[i] as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every marked section of a page of bench/results/ is on the page [`page_for`] (and bench/results.py's
    /// `page_for`) names, so the next run of its benchmark replaces it instead of starting another page.
    #[test]
    fn each_section_is_on_the_page_its_writer_writes() {
        let dir = bench_dir().join("results");
        let mut sections = Vec::new();
        for e in std::fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            if path.extension().is_none_or(|x| x != "md") {
                continue;
            }
            let page = path.file_stem().unwrap().to_string_lossy().into_owned();
            for line in std::fs::read_to_string(&path).unwrap().lines() {
                if let Some(name) = line.strip_prefix("<!-- begin:").and_then(|r| r.strip_suffix(" -->")) {
                    assert_eq!(page_for(name), page, "section {name} is on bench/results/{page}.md");
                    sections.push(name.to_owned());
                }
            }
        }
        assert!(sections.len() > 10, "only {} sections in bench/results/", sections.len());
        // The run.sh scripts' writer (bench/results.py) puts each section on the same page.
        let out = std::process::Command::new("python3")
            .arg("-c")
            .arg("import sys, results; print('\\n'.join(results.page_for(n) for n in sys.argv[1:]))")
            .args(&sections)
            .current_dir(bench_dir())
            .output()
            .unwrap();
        let pages: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect();
        let rust: Vec<&str> = sections.iter().map(|n| page_for(n)).collect();
        assert_eq!(pages, rust, "bench/results.py's page_for differs from report.rs's: {}", String::from_utf8_lossy(&out.stderr));
    }
}
