//! A real headless Chromium (Debian's `chromium`) through a real edge: a protected URL sends the
//! browser to the queue page, which renders in zh-CN or en from the browser's language, waits,
//! and once admitted goes to the target by itself. Screenshots are kept in
//! target/test-artifacts/queue-*.png.
//!
//! Needs the Debian packages `chromium` and `fonts-noto-cjk` (the test command installs them);
//! the binary is `chromium` from PATH, or `WICKET_CHROMIUM`.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::*;

fn chromium() -> String {
    std::env::var("WICKET_CHROMIUM").unwrap_or_else(|_| "chromium".into())
}

fn artifacts() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/test-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs Chromium headless on `url` with `lang`; returns the DOM after `budget_ms` of page time
/// (and writes a screenshot when asked).
async fn chromium_run(url: &str, lang: &str, budget_ms: u64, screenshot: Option<&PathBuf>) -> String {
    let profile = tempfile::tempdir().unwrap();
    let mut cmd = tokio::process::Command::new(chromium());
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        "--window-size=412,915",
    ])
    .arg(format!("--user-data-dir={}", profile.path().display()))
    .arg(format!("--lang={lang}"))
    .arg(format!("--accept-lang={lang}"))
    .arg(format!("--timeout={budget_ms}"));
    // (--timeout bounds the load; the DOM is dumped at the load event.)
    match screenshot {
        Some(p) => cmd.arg(format!("--screenshot={}", p.display())),
        None => cmd.arg("--dump-dom"),
    };
    cmd.arg(url).kill_on_drop(true).env("LANGUAGE", lang).env("LANG", "C.UTF-8");
    let out = tokio::time::timeout(Duration::from_secs(30), cmd.output())
        .await
        .expect("chromium did not finish in 30 s")
        .unwrap_or_else(|e| panic!("cannot run {} ({e}): install the Debian packages chromium and fonts-noto-cjk", chromium()));
    assert!(out.status.success(), "chromium failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs Chromium headless with a DevTools port on `url` until `done(page url, page title)` holds
/// (read from DevTools' /json/list); returns (url, title) then.
async fn chromium_until(url: &str, lang: &str, done: impl Fn(&str, &str) -> bool) -> (String, String) {
    let profile = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut child = tokio::process::Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=412,915",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--lang={lang}"))
        .arg(format!("--accept-lang={lang}"))
        .arg(format!("--remote-debugging-port={port}"))
        .arg(url)
        .env("LANGUAGE", lang)
        .env("LANG", "C.UTF-8")
        .kill_on_drop(true)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {} ({e}): install the Debian packages chromium and fonts-noto-cjk", chromium()));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut last = String::new();
    let mut title = String::new();
    loop {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            let r = get(&format!("http://127.0.0.1:{port}/json/list"), &[]).await;
            if r.status == 200 {
                let pages = r.json();
                if let Some(p) = pages.as_array().and_then(|a| a.iter().find(|p| p["type"] == "page")) {
                    last = p["url"].as_str().unwrap_or_default().to_owned();
                    title = p["title"].as_str().unwrap_or_default().to_owned();
                }
            }
        }
        if done(&last, &title) {
            let _ = child.kill().await;
            return (last, title);
        }
        assert!(std::time::Instant::now() < deadline, "not there within 30 s; page at {last:?}, title {title:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_protected_url_queue_page_in_zh_cn_and_en_then_admitted_to_the_target() {
    let origin = TestUpstream::start("origin").await;
    let edge = TestEdge::start(&format!(
        "origin = \"{}\"\n[tokens]\nissuer = \"wicket\"\nsigning-kid = \"hs-1\"\n[[tokens.keys]]\nkid = \"hs-1\"\nalg = \"HS256\"\n\
         secret = \"{HS_SECRET}\"\n[[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy/ev-1\"\nprotected = [\"/buy/ev-1\"]\n\
         release = {{ mode = \"fixed\", rate = 0.0 }}\n",
        origin.url()
    ));
    // Someone ahead, so the browsers wait with a place > 1.
    get(&edge.url("/queue/r1"), &[("accept", "application/json"), ("user-agent", "first")]).await;
    let url = edge.url("/buy/ev-1");
    // zh-CN: the script rendered a live status in Chinese (the title is set from each status).
    let (at, _) = chromium_until(&url, "zh-CN", |_, title| title == "您正在排队 · 排队中").await;
    assert!(at.ends_with("/queue/r1"), "sent to the queue page: {at}");
    let dom = chromium_run(&url, "zh-CN", 4000, None).await;
    assert!(dom.contains("lang=\"zh-CN\"") && dom.contains("您正在排队"), "{dom}");
    chromium_run(&url, "zh-CN", 4000, Some(&artifacts().join("queue-zh-CN.png"))).await;
    // en: the same page in English.
    chromium_until(&url, "en-US", |_, title| title == "You are in line · Waiting room").await;
    let dom = chromium_run(&url, "en-US", 4000, None).await;
    assert!(dom.contains("lang=\"en\"") && dom.contains("You are in line"), "{dom}");
    chromium_run(&url, "en-US", 4000, Some(&artifacts().join("queue-en.png"))).await;
    // Now the room releases: a browser opening the protected URL queues, is admitted and lands
    // on the target by itself, with the admission token it was given.
    let r = edge.admin("PUT", "/admin/rooms/r1/release", r#"{"mode":"fixed","rate":1000}"#).await;
    assert_eq!(r.status, 200);
    let hits = origin.hits.load(std::sync::atomic::Ordering::SeqCst);
    let (landed, _) = chromium_until(&url, "en-US", |at, _| {
        at.ends_with("/buy/ev-1") && origin.hits.load(std::sync::atomic::Ordering::SeqCst) > hits
    })
    .await;
    assert!(landed.ends_with("/buy/ev-1"), "the browser is at {landed}");
    for f in ["queue-zh-CN.png", "queue-en.png"] {
        let len = std::fs::metadata(artifacts().join(f)).map(|m| m.len()).unwrap_or(0);
        assert!(len > 1000, "{f}: {len} bytes");
    }
}

/// The operator console's page runs in a real browser: its script loads under the page's strict
/// content security policy, finds no session, and shows the sign-in form in the browser's language.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_the_console_page_runs_and_asks_to_sign_in_in_zh_cn_and_en() {
    let edge = TestEdge::start("");
    for (lang, title) in [("zh-CN", "登录 · Wicket 控制台"), ("en-US", "Sign in · Wicket console")] {
        let (_, seen) = chromium_until(&edge.admin_url("/"), lang, |_, t| t.contains("·")).await;
        assert_eq!(seen, title, "{lang}");
    }
}
