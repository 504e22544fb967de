//! The `wicket` binary: `check-config` on every shipped example, bad configs, and a graceful stop
//! on SIGTERM/SIGINT.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn wicket() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_wicket"));
    c.env("WICKET_ADMIN_TOKEN", "an-admin-token-from-the-environment");
    c
}

fn examples() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        // Names a site's real certificate files: tests/tls.rs checks it with test ones in their place.
        .filter(|p| !p.ends_with("https.toml") && !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("https-test-")))
        .collect();
    v.sort();
    v
}

#[test]
fn every_shipped_example_config_passes_check_config() {
    let files = examples();
    assert!(files.len() >= 2, "{files:?}");
    for f in files {
        let out = wicket().arg("check-config").arg(&f).output().unwrap();
        assert!(
            out.status.success(),
            "{}: {}{}",
            f.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn a_bad_config_lists_every_problem_with_its_path_and_exits_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("bad.toml");
    std::fs::write(
        &f,
        "[edge]\nlisten = \"nowhere\"\nsite-dir = \"missing\"\n[[edge.limits]]\npath = \"/\"\nkey = \"ip\"\nrate = \"5r/h\"\n\
         [edge.bot.pow]\ndifficulty = 99\n",
    )
    .unwrap();
    for args in [vec!["check-config".to_owned()], vec!["serve".to_owned(), "--config".to_owned()]] {
        let out = wicket().args(&args).arg(&f).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        for path in ["edge.listen", "edge.site-dir", "edge.limits[0].rate", "edge.bot.pow.difficulty"] {
            assert!(err.contains(path), "{args:?} missing {path}: {err}");
        }
    }
    std::fs::write(&f, "[edge]\nlisen = 1\n").unwrap();
    let out = wicket().arg("check-config").arg(&f).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("lisen"));
    std::fs::write(&f, "not = [toml").unwrap();
    assert_eq!(wicket().arg("check-config").arg(&f).output().unwrap().status.code(), Some(2));
}

/// Type, missing and rule problems in one pass (issue #25): a bad `listen` (a rule), a limit without
/// `path` (missing), `key = "face"` (a wrong value) and `rate = "ten per second"` (a rule of that same
/// limit) are all named, each with its path.
#[test]
fn check_config_names_type_missing_and_rule_problems_together() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("bad.toml");
    std::fs::write(&f, "[edge]\nlisten = \"nowhere\"\n[[edge.limits]]\nkey = \"face\"\nrate = \"ten per second\"\n").unwrap();
    let out = wicket().arg("check-config").arg(&f).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for want in [
        "edge.listen: not an address like 0.0.0.0:8080: \"nowhere\"",
        "edge.limits[0].path: missing field `path`",
        "edge.limits[0].key: unknown variant `face`",
        "edge.limits[0].rate: rate must look like \"10r/s\" or \"30r/m\": \"ten per second\"",
    ] {
        assert!(err.contains(want), "missing {want:?} in:\n{err}");
    }
}

/// Wrong types, unknown keys and out-of-range values of the edge's part, `[tokens]` and the embedded
/// core's part come in one answer, each with its path and line, an unknown key with the nearest valid
/// one; the same file with them fixed is ok, with `tokens.issuer` defaulted alike by both parts.
#[test]
fn check_config_reports_every_problem_of_a_combined_file_at_once_with_lines() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("combined.toml");
    let keys = format!("{}/../core/examples/keys", env!("CARGO_MANIFEST_DIR"));
    let good_tail = format!(
        "[tokens]\nsigning-kid = \"ed-1\"\n[[tokens.keys]]\nkid = \"ed-1\"\nalg = \"EdDSA\"\n\
         private-key-file = \"{keys}/demo-ed25519.pem\"\npublic-key-file = \"{keys}/demo-ed25519.pub.pem\"\n"
    );
    let bad = format!(
        "store = \"memory\"\nadmin-token = \"0123456789abcdef-admin\"\n\
         [edge]\ncore = \"embedded\"\nthreads = \"four\"\nkeepalive-secondz = 5\nprune-seconds = 0\n\
         [payment]\ncallback-secret = \"abc\"\nquery-timeout-ms = \"soon\"\n{good_tail}leeway-secs = 2\n"
    );
    std::fs::write(&f, &bad).unwrap();
    let out = wicket().arg("check-config").arg(&f).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for want in [
        "edge.threads: invalid type: string \"four\", expected usize (line 5, column 1)",
        "edge.keepalive-secondz: unknown key `keepalive-secondz`; did you mean `keepalive-seconds`? (line 6, column 1)",
        "edge.prune-seconds: must be between 1 and 3600 (line 7, column 1)",
        "payment.callback-secret: must be at least 16 characters (line 9, column 1)",
        "payment.query-timeout-ms: invalid type: string \"soon\", expected u64 (line 10, column 1)",
        "tokens.keys[0].leeway-secs: unknown key `leeway-secs`",
    ] {
        assert!(err.contains(want), "missing {want:?} in:\n{err}");
    }
    // Each path once, although the edge and the core both read `[tokens]`.
    let lines: Vec<&str> = err.lines().skip(1).collect();
    let mut paths: Vec<&str> = lines.iter().filter_map(|l| l.split(':').next()).collect();
    let n = paths.len();
    paths.dedup();
    assert_eq!(paths.len(), n, "{err}");
    // `[tls]` on the embedded core: refused at start, so check-config says so too.
    let made = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "k.pem", "-out", "c.pem"])
        .args(["-subj", "/CN=localhost", "-days", "1"])
        .current_dir(dir.path())
        .output()
        .expect("the openssl command");
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let with_tls = format!(
        "store = \"memory\"\nadmin-token = \"0123456789abcdef-admin\"\n[edge]\ncore = \"embedded\"\n\
         [payment]\ncallback-secret = \"0123456789abcdef-callback\"\n[tls]\ncert-file = \"c.pem\"\nkey-file = \"k.pem\"\n{good_tail}"
    );
    std::fs::write(&f, &with_tls).unwrap();
    let out = wicket().arg("check-config").arg(&f).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.lines().any(|l| l.starts_with("tls") && l.contains("embedded core")), "{err}");
    // Fixed, it is ok — no `tokens.issuer` needed by either part.
    let good = format!(
        "store = \"memory\"\nadmin-token = \"0123456789abcdef-admin\"\n[edge]\ncore = \"embedded\"\n\
         [payment]\ncallback-secret = \"0123456789abcdef-callback\"\n{good_tail}"
    );
    std::fs::write(&f, &good).unwrap();
    let out = wicket().arg("check-config").arg(&f).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill").arg(format!("-{sig}")).arg(pid.to_string()).status().unwrap().success();
    assert!(ok);
}

async fn stops_gracefully_on(sig: &str) {
    let origin = TestUpstream::start("origin").await;
    let dir = tempfile::tempdir().unwrap();
    let (port, admin) = (free_port(), free_port());
    let cfg = dir.path().join("w.toml");
    std::fs::write(
        &cfg,
        format!(
            "[edge]\nlisten = \"127.0.0.1:{port}\"\nadmin-listen = \"127.0.0.1:{admin}\"\norigin = \"{}\"\n\
             shutdown-grace-seconds = 3\nthreads = 1\n",
            origin.url()
        ),
    )
    .unwrap();
    let mut child =
        KillOnDrop(wicket().arg("serve").arg("--config").arg(&cfg).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap());
    let base = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "wicket did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    // An in-flight request that outlives the signal by a second.
    let url = format!("{base}/slow/1200");
    let in_flight = tokio::spawn(async move { get(&url, &[]).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let signalled = Instant::now();
    signal(child.id(), sig);
    let r = in_flight.await.unwrap();
    assert_eq!(r.status, 200, "the in-flight request finishes");
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "{status}");
            break;
        }
        assert!(signalled.elapsed() < Duration::from_millis(4500), "wicket did not stop within its grace (3 s)");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err(), "the port is closed after the stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_serve_within_its_grace_after_in_flight_requests() {
    stops_gracefully_on("TERM").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_stops_serve_within_its_grace_after_in_flight_requests() {
    stops_gracefully_on("INT").await;
}

/// The demo tells one story: the detail page counts down to the event's real opening (read
/// through the edge, not written in the page), the room opens with the event, an admitted fan
/// holds on the stand-in buy page through the edge, pays through the stand-in provider and ends
/// on a done page that ends the session. Its secrets are private files, gone when it stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_tells_one_story_from_countdown_to_paid_then_stops_on_sigterm_and_leaves_no_secrets() {
    use std::io::BufRead;
    use std::os::unix::fs::PermissionsExt;
    let (edge, admin, core, origin) = (free_port(), free_port(), free_port(), free_port());
    let mut child = KillOnDrop(wicket()
        .arg("demo")
        .args(["--edge-port", &edge.to_string(), "--admin-port", &admin.to_string()])
        .args(["--core-port", &core.to_string(), "--origin-port", &origin.to_string()])
        .args(["--opens-in-seconds", "8"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap());
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    let config = PathBuf::from(first.split("config: ").nth(1).and_then(|r| r.strip_suffix(")\n")).unwrap_or_else(|| panic!("{first}")));
    let dir = config.parent().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", edge)).is_err() {
        assert!(Instant::now() < deadline, "demo did not start");
        assert!(child.try_wait().unwrap().is_none(), "demo exited early");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Secrets: a private folder, private files.
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700, "{}", dir.display());
    assert_eq!(mode(&config), 0o600, "{}", config.display());
    assert!(std::fs::read_to_string(&config).unwrap().contains("callback-secret"));

    let base = format!("http://127.0.0.1:{edge}");
    let page = get(&format!("{base}/"), &[]).await;
    assert_eq!(page.status, 200);
    assert!(page.text().contains("Prehistoric Park"));
    // The page counts down to the event's opening, which it reads through the edge.
    assert!(page.text().contains("data-event=\"ev-42\"") && !page.text().contains("data-opens-at"), "{}", page.text());
    let ev = get(&format!("{base}/v1/events/ev-42"), &[]).await;
    assert_eq!(ev.status, 200, "{}", ev.text());
    assert_eq!(ev.json()["name"], "Prehistoric park, 1-yuan day ticket");
    let opens = time::OffsetDateTime::parse(ev.json()["opens_at"].as_str().unwrap(), &time::format_description::well_known::Rfc3339).unwrap();
    let left = (opens - time::OffsetDateTime::now_utc()).whole_seconds();
    assert!((-10..=9).contains(&left), "opens in {left} s");
    // Its style sheet is served by the edge from memory; the page, through the edge, in the
    // language asked, which sticks (the queue page reads the same cookie).
    let css = get(&format!("{base}/site.css"), &[]).await;
    assert_eq!(css.status, 200);
    assert!(css.header("content-type").is_some_and(|t| t.starts_with("text/css")), "{:?}", css.header("content-type"));
    assert_eq!(css.text(), wicket_edge::demo::SITE_CSS);
    let ja = get(&format!("{base}/?lang=ja"), &[]).await;
    assert!(ja.text().contains("<html lang=\"ja\" dir=\"ltr\">") && ja.text().contains("<h1>先史時代パーク — 1元 1日券</h1>"), "{}", ja.text());
    let kept = ja.cookies().get("wicket_lang").cloned().expect("the choice is kept");
    let queue = get(&format!("{base}/queue/ev-42"), &[("accept", "text/html"), ("cookie", &format!("wicket_lang={kept}"))]).await;
    assert!(queue.text().contains("lang=\"ja\"") || queue.text().contains("lang=ja"), "{}", queue.text());
    let o = get(&format!("{base}/anything"), &[]).await;
    assert!(o.text().contains("existing site"));
    assert_eq!(get(&format!("{base}/buy/ev-42"), &[("accept", "text/html")]).await.status, 302);

    // A fan (with a cookie jar) queues; the room opens with the event and lets them in.
    let mut jar: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    let cookie = |jar: &std::collections::HashMap<String, String>| jar.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("; ");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut states = Vec::new();
    loop {
        let r = request("GET", &format!("{base}/queue/ev-42"), &[("accept", "application/json"), ("cookie", &cookie(&jar))], b"").await;
        jar.extend(r.cookies());
        assert_eq!(r.status, 200, "{}", r.text());
        let state = r.json()["state"].as_str().unwrap_or_default().to_owned();
        if states.last() != Some(&state) {
            states.push(state.clone());
        }
        if state == "admitted" {
            break;
        }
        assert!(Instant::now() < deadline, "not admitted within 30 s: {states:?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(states.first().map(String::as_str), Some("not_open"), "the room opens with the event: {states:?}");
    // The stand-in buy page, then a hold through the edge (admission cookie → the core's bearer).
    let r = request("GET", &format!("{base}/buy/ev-42"), &[("accept", "text/html"), ("cookie", &cookie(&jar))], b"").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("Hold one ticket"), "{}", r.text());
    let hold = br#"{"sku":"park","qty":1,"idempotency_key":"demo-test-1"}"#;
    let r = request(
        "POST",
        &format!("{base}/v1/events/ev-42/holds"),
        &[("content-type", "application/json"), ("accept", "application/json"), ("cookie", &cookie(&jar))],
        hold,
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text());
    let order = r.json();
    // Paid through the stand-in provider (a signed callback to the core).
    let pay = serde_json::json!({"order_id": order["order_id"], "amount_cents": order["amount_cents"]}).to_string();
    let r = request(
        "POST",
        &format!("{base}/buy/ev-42/pay"),
        &[("content-type", "application/json"), ("cookie", &cookie(&jar))],
        pay.as_bytes(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["result"], "paid", "{}", r.text());
    // The done page ends the session: the buy page sends the fan back to the queue.
    let r = request("GET", &format!("{base}/buy/ev-42/done"), &[("accept", "text/html"), ("cookie", &cookie(&jar))], b"").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("You have a ticket") && r.header("wicket-revoke").is_none(), "{}", r.text());
    let r = request("GET", &format!("{base}/buy/ev-42"), &[("accept", "text/html"), ("cookie", &cookie(&jar))], b"").await;
    assert_eq!((r.status, r.header("location")), (302, Some("/queue/ev-42")), "the session ended");

    signal(child.id(), "TERM");
    let started = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(5), "demo did not stop");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut out = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut out).unwrap();
    assert!(out.contains(&format!("http://127.0.0.1:{edge}/")), "{out}");
    assert!(!dir.exists(), "the demo's folder (its secrets) is left behind: {}", dir.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn core_runs_the_sale_core_alone_from_the_shared_config() {
    let dir = tempfile::tempdir().unwrap();
    let ports = wicket_edge::demo::DemoPorts { edge: free_port(), admin: free_port(), core: free_port(), origin: free_port() };
    let secrets = wicket_edge::demo::DemoSecrets { admin_token: "a".repeat(32), hs_secret: "h".repeat(48), callback_secret: "c".repeat(32) };
    let cfg = wicket_edge::demo::write_files(dir.path(), ports, &secrets).unwrap();
    let mut child = KillOnDrop(wicket().arg("core").arg("--config").arg(&cfg).stderr(Stdio::null()).spawn().unwrap());
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", ports.core)).is_err() {
        assert!(Instant::now() < deadline, "core did not start");
        assert!(child.try_wait().unwrap().is_none(), "core exited early");
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = get(&format!("http://127.0.0.1:{}/v1/events/ev-42", ports.core), &[]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(std::net::TcpStream::connect(("127.0.0.1", ports.edge)).is_err(), "no edge in `wicket core`");
    signal(child.id(), "TERM");
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(started.elapsed() < Duration::from_secs(5), "core did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_busy_port_is_named_with_the_key_that_sets_it() {
    let dir = tempfile::tempdir().unwrap();
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port();
    let ports = wicket_edge::demo::DemoPorts { edge: free_port(), admin: free_port(), core: port, origin: free_port() };
    let secrets = wicket_edge::demo::DemoSecrets { admin_token: "a".repeat(32), hs_secret: "h".repeat(48), callback_secret: "c".repeat(32) };
    let cfg = wicket_edge::demo::write_files(dir.path(), ports, &secrets).unwrap();
    let out = wicket().arg("core").arg("--config").arg(&cfg).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains(&format!("127.0.0.1:{port}")) && err.contains("listen"), "{err}");
    // The edge's own ports too.
    let ports = wicket_edge::demo::DemoPorts { edge: port, admin: free_port(), core: free_port(), origin: free_port() };
    let cfg = wicket_edge::demo::write_files(dir.path(), ports, &secrets).unwrap();
    let out = wicket().arg("serve").arg("--config").arg(&cfg).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains(&format!("127.0.0.1:{port}")) && err.contains("edge.listen"), "{err}");
    drop(busy);
}

#[test]
fn check_config_checks_the_embedded_cores_part_of_the_file_too() {
    let dir = tempfile::tempdir().unwrap();
    let ports = wicket_edge::demo::DemoPorts { edge: free_port(), admin: free_port(), core: free_port(), origin: free_port() };
    let secrets = wicket_edge::demo::DemoSecrets { admin_token: "a".repeat(32), hs_secret: "h".repeat(48), callback_secret: "c".repeat(32) };
    let cfg = wicket_edge::demo::write_files(dir.path(), ports, &secrets).unwrap();
    let ok = wicket().arg("check-config").arg(&cfg).output().unwrap();
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    // A short callback secret and an event file that is not there: both named, exit 2.
    let text = std::fs::read_to_string(&cfg).unwrap();
    let broken = text.replace("event-files = [\"ev-42.json\"]", "event-files = [\"ev-42.json\", \"ev-43.json\"]");
    let broken = with_short_callback_secret(&broken);
    std::fs::write(&cfg, &broken).unwrap();
    let out = wicket().arg("check-config").arg(&cfg).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("event-files[1]") && err.contains("payment.callback-secret"), "{err}");
    // A wrongly typed event: its problems with their paths.
    std::fs::write(&cfg, &text).unwrap();
    std::fs::write(dir.path().join("ev-42.json"), r#"{"name":"x","opens_at":"tomorrow","closes_at":"2030-01-01T00:00:00Z","pools":[],"skus":[]}"#).unwrap();
    let out = wicket().arg("check-config").arg(&cfg).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("event-files[0]") && err.contains("opens_at"), "{err}");
}

/// The demo config with its callback secret cut to three characters.
fn with_short_callback_secret(text: &str) -> String {
    text.lines()
        .map(|l| if l.starts_with("callback-secret") { "callback-secret = \"abc\"".to_owned() } else { l.to_owned() })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Starts `wicket <command> --config <cfg>`, waits until every port in `ports` answers and each has
/// had its `listening on` line (a listener accepts before its line is written: on a busy machine a
/// stop between the two left the line out), stops it with SIGTERM and returns what it wrote on
/// stderr (a pipe: not a terminal).
fn stderr_of_a_run(command: &str, cfg: &Path, ports: &[u16]) -> String {
    use std::io::Read;
    let mut child = KillOnDrop(wicket().arg(command).arg("--config").arg(cfg).env_remove("RUST_LOG").stderr(Stdio::piped()).spawn().unwrap());
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let reader = {
        let (seen, mut stderr) = (seen.clone(), child.stderr.take().unwrap());
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = stderr.read(&mut buf) {
                seen.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        })
    };
    let listed = |port: &u16| String::from_utf8_lossy(&seen.lock().unwrap()).contains(&format!("127.0.0.1:{port} ("));
    let deadline = Instant::now() + Duration::from_secs(20);
    while ports.iter().any(|p| std::net::TcpStream::connect(("127.0.0.1", *p)).is_err() || !listed(p)) {
        assert!(Instant::now() < deadline, "wicket {command} did not start");
        assert!(child.try_wait().unwrap().is_none(), "wicket {command} exited early");
        std::thread::sleep(Duration::from_millis(20));
    }
    signal(child.id(), "TERM");
    child.wait().unwrap();
    reader.join().unwrap();
    let out = seen.lock().unwrap().clone();
    String::from_utf8(out).unwrap()
}

#[test]
fn log_format_json_writes_json_lines_text_has_no_colour_codes_and_every_listener_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let ports = wicket_edge::demo::DemoPorts { edge: free_port(), admin: free_port(), core: free_port(), origin: free_port() };
    let secrets = wicket_edge::demo::DemoSecrets { admin_token: "a".repeat(32), hs_secret: "h".repeat(48), callback_secret: "c".repeat(32) };
    let cfg = wicket_edge::demo::write_files(dir.path(), ports, &secrets).unwrap();
    let demo = std::fs::read_to_string(&cfg).unwrap();
    let with = |edge_format: &str, core_format: &str| {
        let text = demo.replacen("[edge]\n", &format!("[edge]\nlog-format = \"{edge_format}\"\n"), 1);
        std::fs::write(&cfg, format!("{text}\n[core]\nlog-format = \"{core_format}\"\n")).unwrap();
    };
    let listening = |what: &str, port: u16| format!("listening on 127.0.0.1:{port} ({what}");

    // The edge with its embedded core, as JSON lines: every line is one object; one line per listener.
    with("json", "text");
    let err = stderr_of_a_run("serve", &cfg, &[ports.edge, ports.admin, ports.core]);
    let mut messages = Vec::new();
    for line in err.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}\n{err}"));
        assert!(v["level"].is_string() && v["timestamp"].is_string(), "{line}");
        messages.push(v["fields"]["message"].as_str().unwrap_or_default().to_owned());
    }
    for (what, port) in [("public HTTP", ports.edge), ("admin", ports.admin), ("core API", ports.core)] {
        let want = listening(what, port);
        assert_eq!(messages.iter().filter(|m| m.starts_with(&want)).count(), 1, "{want}: {err}");
    }

    // Text on a pipe: no colour codes, the same lines.
    with("text", "json");
    let err = stderr_of_a_run("serve", &cfg, &[ports.edge, ports.admin, ports.core]);
    assert!(!err.contains("\x1b["), "colour codes on a pipe: {err:?}");
    for (what, port) in [("public HTTP", ports.edge), ("admin", ports.admin), ("core API", ports.core)] {
        assert_eq!(err.lines().filter(|l| l.contains(&listening(what, port))).count(), 1, "{what}: {err}");
    }

    // `wicket core` logs as the core's own `core.log-format` says.
    let err = stderr_of_a_run("core", &cfg, &[ports.core]);
    assert!(!err.trim().is_empty());
    for line in err.lines() {
        serde_json::from_str::<serde_json::Value>(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}\n{err}"));
    }
    assert!(err.contains(&listening("core API", ports.core)), "{err}");

    // Anything else is a config error naming the key.
    for (edge_format, core_format, path) in [("xml", "text", "edge.log-format"), ("text", "JSON", "core.log-format")] {
        with(edge_format, core_format);
        let out = wicket().arg("check-config").arg(&cfg).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(path) && err.contains("\"text\" or \"json\""), "{err}");
    }
}

/// `wicket <sub> --help`: every option and argument says what it is.
#[test]
fn every_subcommand_option_has_help_text() {
    for sub in ["serve", "core", "demo", "check-config", "nginx-import"] {
        let out = wicket().args([sub, "--help"]).output().unwrap();
        assert!(out.status.success(), "{sub}");
        let help = String::from_utf8(out.stdout).unwrap();
        // An option line is "signature  description", or the signature alone with the description
        // on the next, deeper-indented line (clap's layout for long help).
        let lines: Vec<&str> = help.lines().collect();
        let bare: Vec<&str> = lines
            .iter()
            .enumerate()
            .filter(|(_, l)| l.starts_with("  ") && l.trim_start().starts_with(['-', '<']) && !l.trim().contains("  "))
            .filter(|(i, _)| !lines.get(i + 1).is_some_and(|n| n.starts_with("          ") && !n.trim().is_empty()))
            .map(|(_, l)| *l)
            .collect();
        assert!(bare.is_empty(), "wicket {sub} --help has options without a description: {bare:?}\n{help}");
    }
}

/// The demo's stand-in site speaks the 17 fan languages, chosen as the queue page chooses:
/// `?lang=` (kept in the `wicket_lang` cookie), else that cookie, else `Accept-Language`, else
/// English; Arabic and Persian right to left; the page's script gets its texts in that language.
/// Every language has every text of the English catalogue, with the same placeholders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_site_speaks_each_fan_language_chosen_as_the_queue_page_chooses() {
    use wicket_edge::demo::{StandInProvider, start_origin};
    use wicket_edge::i18n::Lang;
    let port = free_port();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let provider = StandInProvider { callback_to: "127.0.0.1:9".parse().unwrap(), callback_secret: "c".repeat(32) };
    // (It makes its own runtime on a thread of its own: started off this one.)
    tokio::task::spawn_blocking(move || start_origin(addr, provider)).await.unwrap().unwrap();
    let base = format!("http://{addr}");
    let text: serde_json::Value = serde_json::from_str(include_str!("../../static/site/text.json")).unwrap();
    let en = text["en"].as_object().unwrap();
    let h1 = |body: &str| body.split("<h1>").nth(1).and_then(|r| r.split("</h1>").next()).unwrap_or_default().to_owned();
    let mut titles = std::collections::HashSet::new();
    for lang in Lang::ALL {
        let t = text[lang.tag()].as_object().unwrap_or_else(|| panic!("no texts for {}", lang.tag()));
        for (k, v) in en {
            let v = v.as_str().unwrap();
            let mine = t.get(k).and_then(|x| x.as_str()).unwrap_or_else(|| panic!("{}: no {k}", lang.tag()));
            for ph in ["{time}", "{order}", "{amount}", "{why}"] {
                assert_eq!(mine.contains(ph), v.contains(ph), "{}: {k} and {ph}", lang.tag());
            }
        }
        let dir = if lang.is_rtl() { "rtl" } else { "ltr" };
        for (path, key) in [("/", "title"), ("/buy/ev-42", "title"), ("/buy/ev-42/done", "done_title")] {
            let r = get(&format!("{base}{path}?lang={}", lang.tag()), &[("accept-language", "en")]).await;
            assert_eq!(r.status, 200, "{path}");
            let body = r.text();
            assert!(body.contains(&format!("lang=\"{}\" dir=\"{dir}\"", lang.tag())), "{} {path}: {body}", lang.tag());
            assert_eq!(h1(&body), wicket_edge::i18n::html_escape(t[key].as_str().unwrap()), "{} {path}", lang.tag());
            assert_eq!(r.header("vary"), Some("Accept-Language, Cookie"));
            assert_eq!(r.cookies().get("wicket_lang").map(String::as_str), Some(lang.tag()), "{} {path}: the choice is kept", lang.tag());
            if path == "/" {
                titles.insert(h1(&body));
                // The script's texts, as JSON in the page.
                let js = body.split("<script type=\"application/json\" id=\"text\">").nth(1).and_then(|r| r.split("</script>").next()).unwrap();
                let js: serde_json::Value = serde_json::from_str(js).unwrap();
                assert_eq!(js["js_open"], t["js_open"], "{}", lang.tag());
                assert!(!body.contains("{{"), "{}: a name left unfilled", lang.tag());
            }
        }
    }
    assert_eq!(titles.len(), 17, "each language its own title: {titles:?}");
    // How a language is chosen, as the queue page chooses: ?lang= over the cookie over
    // Accept-Language; an unknown ?lang= or cookie is passed over; nothing known: English.
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);
    let cases: &[Case] = &[
        ("/", &[("accept-language", "ko-KR,ko;q=0.9,en;q=0.5")], "ko"),
        ("/", &[("accept-language", "fr;q=0.4, zh-TW;q=0.8")], "zh-TW"),
        ("/", &[("accept-language", "xx, sv")], "en"),
        ("/", &[], "en"),
        ("/", &[("cookie", "wicket_lang=fa"), ("accept-language", "ja")], "fa"),
        ("/?lang=de", &[("cookie", "wicket_lang=fa"), ("accept-language", "ja")], "de"),
        ("/?lang=klingon", &[("cookie", "wicket_lang=ar")], "ar"),
        ("/buy/ev-42", &[("cookie", "wicket_lang=nope"), ("accept-language", "pt-BR")], "pt-BR"),
    ];
    for (path, headers, want) in cases {
        let r = get(&format!("{base}{path}"), headers).await;
        assert!(r.text().contains(&format!("<html lang=\"{want}\"")), "{path} {headers:?}: {}", &r.text()[..200.min(r.text().len())]);
        let set = r.cookies().contains_key("wicket_lang");
        assert_eq!(set, path.contains("lang=de"), "{path}: only a valid ?lang= is kept");
    }
}
