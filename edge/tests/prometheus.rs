//! The Prometheus kit (issue #14): a real edge's and its core's `/metrics`, with a sale going on,
//! pass `promtool check metrics` without a warning; `deploy/prometheus/alerts.yml` passes
//! `promtool check rules` and its unit tests (`alerts_test.yml`); `deploy/grafana/wicket.json` is a
//! well-formed dashboard; and every metric name an alert or a panel uses is one the edge or the core
//! really exports.
//!
//! promtool comes with Debian's `prometheus` package (`scripts/test.sh` installs it). Without it
//! these tests fail, naming the package: they never pass by skipping.

mod common;

use std::collections::{BTreeSet, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Runs promtool with `args` (and `stdin`, when given); (exit success, stdout + stderr).
fn promtool(args: &[&str], stdin: Option<&str>) -> (bool, String) {
    let mut child = Command::new("promtool")
        .args(args)
        .current_dir(repo())
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot run promtool ({e}): install Debian's `prometheus` package (scripts/test.sh does) to run these tests")
        });
    if let Some(text) = stdin {
        child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// Metric names in a PromQL expression (ours are all `wicket_*`, plus `process_*`).
fn names_in(expr: &str) -> Vec<String> {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|w| w.starts_with("wicket_") || w.starts_with("process_"))
        .map(str::to_owned)
        .collect()
}

/// Every metric name in a Prometheus text exposition: families (`# TYPE`) and samples (`_bucket`...).
fn exported(text: &str) -> HashSet<String> {
    text.lines()
        .filter_map(|l| match l.strip_prefix("# TYPE ") {
            Some(rest) => rest.split(' ').next(),
            None if !l.starts_with('#') => l.split(['{', ' ']).next(),
            None => None,
        })
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The `expr:` of every rule in alerts.yml (one line, or a folded `>-` block).
fn alert_exprs() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo().join("deploy/prometheus/alerts.yml")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut exprs = Vec::new();
    let mut alert = String::new();
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim_start();
        if let Some(name) = t.strip_prefix("- alert: ") {
            alert = name.trim().to_owned();
        }
        let Some(e) = t.strip_prefix("expr: ") else { continue };
        let e = e.trim();
        let expr = if e.starts_with(">-") || e.starts_with('|') {
            let indent = l.len() - t.len();
            lines[i + 1..]
                .iter()
                .take_while(|n| n.trim().is_empty() || n.len() - n.trim_start().len() > indent)
                .map(|n| n.trim())
                .collect::<Vec<_>>()
                .join(" ")
        } else {
            e.to_owned()
        };
        exprs.push((alert.clone(), expr));
    }
    exprs
}

/// Lints the dashboard; returns (panel title, expr) of every target.
fn dashboard_exprs() -> Vec<(String, String)> {
    let path = repo().join("deploy/grafana/wicket.json");
    let d: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).expect("wicket.json is JSON");
    assert!(d["schemaVersion"].as_u64().is_some_and(|v| v >= 36), "schemaVersion: {}", d["schemaVersion"]);
    assert!(d["title"].is_string() && d["uid"].is_string(), "a title and a uid");
    let vars = d["templating"]["list"].as_array().expect("templating.list");
    let room = vars.iter().find(|v| v["name"] == "room").expect("a `room` template variable");
    assert!(room["query"]["query"].as_str().is_some_and(|q| q.starts_with("label_values(") && q.contains("room")), "{room}");
    let sources: HashSet<String> = vars.iter().filter(|v| v["type"] == "datasource").map(|v| format!("${{{}}}", v["name"].as_str().unwrap())).collect();
    let panels = d["panels"].as_array().expect("panels");
    assert!(panels.len() >= 10, "{} panels", panels.len());
    let mut ids = HashSet::new();
    let mut exprs = Vec::new();
    for p in panels {
        let title = p["title"].as_str().expect("every panel has a title").to_owned();
        assert!(ids.insert(p["id"].as_u64().unwrap_or_else(|| panic!("{title}: no id"))), "{title}: duplicate id {}", p["id"]);
        for k in ["h", "w", "x", "y"] {
            assert!(p["gridPos"][k].is_u64(), "{title}: gridPos.{k}");
        }
        assert!(p["type"].is_string(), "{title}: type");
        let ds = &p["datasource"];
        assert!(ds["type"] == "prometheus" && ds["uid"].as_str().is_some_and(|u| sources.contains(u)), "{title}: datasource {ds}");
        let targets = p["targets"].as_array().filter(|t| !t.is_empty()).unwrap_or_else(|| panic!("{title}: no targets"));
        let mut refs = HashSet::new();
        for t in targets {
            assert!(refs.insert(t["refId"].as_str().expect("refId")), "{title}: duplicate refId");
            let expr = t["expr"].as_str().unwrap_or_else(|| panic!("{title}: a target without expr"));
            exprs.push((title.clone(), expr.to_owned()));
        }
    }
    exprs
}

#[test]
fn the_alert_rules_pass_promtool_and_their_unit_tests() {
    let (ok, out) = promtool(&["check", "rules", "deploy/prometheus/alerts.yml"], None);
    assert!(ok && out.contains("SUCCESS"), "{out}");
    let (ok, out) = promtool(&["test", "rules", "deploy/prometheus/alerts_test.yml"], None);
    assert!(ok && out.contains("SUCCESS"), "{out}");
    // The seven alerts of issue #14 (and the room pause), each waiting (`for:`) and with a severity.
    let text = std::fs::read_to_string(repo().join("deploy/prometheus/alerts.yml")).unwrap();
    let alerts: Vec<String> = alert_exprs().into_iter().map(|(a, _)| a).collect();
    for a in [
        "WicketCoreP99OverTarget",
        "WicketReconciliationFailed",
        "WicketEventPaused",
        "WicketRoomPaused",
        "WicketSoldOut",
        "WicketEdge5xxRate",
        "WicketRedisRestarted",
        "WicketRoomNoLeader",
    ] {
        assert!(alerts.iter().any(|x| x == a), "{a} missing: {alerts:?}");
    }
    let count = |needle: &str| text.lines().filter(|l| l.trim_start().starts_with(needle)).count();
    assert_eq!(count("for:"), alerts.len(), "every alert has a `for:`");
    assert_eq!(count("severity:"), alerts.len(), "every alert has a severity");
    assert_eq!(count("summary:"), alerts.len());
    assert_eq!(text.matches("unbook").count(), alerts.len(), "every description gives a runbook hint");
}

#[test]
fn the_grafana_dashboard_is_well_formed() {
    let exprs = dashboard_exprs();
    for (title, expr) in &exprs {
        assert!(!names_in(expr).is_empty(), "{title}: no metric in {expr}");
    }
    // The console's charts are all there.
    let all: String = exprs.iter().map(|(_, e)| e.as_str()).collect::<Vec<_>>().join(" ");
    for m in [
        "wicket_room_queued",
        "wicket_room_serving",
        "wicket_room_issued",
        "wicket_room_release_rate",
        "wicket_room_measured_release_rate",
        "wicket_room_core_p99_seconds",
        "wicket_room_core_p99_target_seconds",
        "wicket_room_core_error_ratio",
        "wicket_room_core_utilisation_ratio",
        "wicket_room_active",
        "wicket_room_budget",
        "wicket_room_stock_sold",
        "wicket_room_stock_held",
        "wicket_room_stock_available",
        "wicket_edge_requests_total",
        "wicket_edge_rejects_total",
        "process_resident_memory_bytes",
    ] {
        assert!(names_in(&all).iter().any(|n| n == m), "no panel charts {m}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_edge_and_core_export_clean_metrics_that_every_alert_and_panel_finds() {
    let now = time::OffsetDateTime::now_utc().replace_nanosecond(0).unwrap();
    // Nobody is let in (rate 0): the fans stay queued.
    let (edge, core_port) = embedded_sale_edge("Metrics", now - time::Duration::minutes(1), 0.0);
    for fan in ["u1", "u2", "u3"] {
        let r = request("GET", &edge.url("/queue/r1"), &[("x-user-id", fan), ("accept", "application/json")], b"").await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    // One hold with a token minted as the room would, a static page, a refusal.
    let token = mint_token("r1", "ev-1", "buyer", 300, "wicket", "hs-1", HS_SECRET);
    let body = json!({"sku": "park", "qty": 1, "idempotency_key": "k-1", "identity": {}}).to_string();
    let r = request(
        "POST",
        &edge.url("/v1/events/ev-1/holds"),
        &[("authorization", &format!("Bearer {token}")), ("content-type", "application/json")],
        body.as_bytes(),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(get(&edge.url("/"), &[]).await.status, 200);
    let r = get(&edge.url("/buy"), &[("cookie", "wicket_a_r1=forged.token.value"), ("x-user-id", "u1")]).await;
    assert!(r.status >= 300, "{}", r.status);

    // The release loop publishes the room's gauges every second and the core's stock every two.
    let core_url = format!("http://127.0.0.1:{core_port}/metrics");
    let deadline = Instant::now() + Duration::from_secs(20);
    let (edge_text, core_text) = loop {
        let e = edge.admin("GET", "/metrics", "").await.text();
        let c = get(&core_url, &[]).await.text();
        if e.contains("wicket_room_stock_held{room=\"r1\"} 1") && c.contains("wicket_core_event_paused{event=\"ev-1\"} 0") {
            break (e, c);
        }
        assert!(Instant::now() < deadline, "no stock gauges after 20 s:\n{e}\n{c}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert!(edge_text.contains("wicket_room_queued{room=\"r1\"} 3"), "{edge_text}");
    assert!(edge_text.contains("wicket_room_core_p99_target_seconds{room=\"r1\"} 0.1"), "{edge_text}");

    for (what, text) in [("edge", &edge_text), ("core", &core_text)] {
        let (ok, out) = promtool(&["check", "metrics"], Some(text));
        assert!(ok && out.trim().is_empty(), "promtool check metrics on the {what}'s /metrics:\n{out}\n---\n{text}");
    }

    let names: HashSet<String> = exported(&edge_text).union(&exported(&core_text)).cloned().collect();
    let mut missing = BTreeSet::new();
    for (alert, expr) in alert_exprs() {
        let used = names_in(&expr);
        assert!(!used.is_empty(), "{alert}: no metric in {expr}");
        missing.extend(used.into_iter().filter(|n| !names.contains(n)).map(|n| format!("alert {alert}: {n}")));
    }
    for (panel, expr) in dashboard_exprs() {
        missing.extend(names_in(&expr).into_iter().filter(|n| !names.contains(n)).map(|n| format!("panel {panel}: {n}")));
    }
    assert!(missing.is_empty(), "names no edge or core exports: {missing:?}\n{edge_text}\n{core_text}");
}
