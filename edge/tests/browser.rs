//! A real headless Chromium (Debian's `chromium`) through a real edge: a protected URL sends the
//! browser to the queue page, which renders in zh-CN, zh-TW, en, ja or ko from the browser's
//! language (or `?lang=`), waits, and once admitted goes to the target by itself; with JavaScript
//! off it shows the real figures the server rendered; before opening it counts down. Screenshots
//! are kept in target/test-artifacts/queue-*.png.
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
    chromium_run_with(url, lang, budget_ms, screenshot, &[]).await
}

/// [`chromium_run`] with extra Chromium flags (`--blink-settings=scriptEnabled=false`: no JS).
async fn chromium_run_with(url: &str, lang: &str, budget_ms: u64, screenshot: Option<&PathBuf>, extra: &[&str]) -> String {
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
    .arg(format!("--timeout={budget_ms}"))
    .args(extra);
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

/// The page's DOM as Chromium shows it with JavaScript off.
async fn chromium_dom_without_js(url: &str, lang: &str, screenshot: Option<&PathBuf>) -> String {
    if let Some(path) = screenshot {
        chromium_run_with(url, lang, 3000, Some(path), &["--blink-settings=scriptEnabled=false"]).await;
    }
    chromium_doms(url, lang, false, &[0]).await.remove(0)
}

/// The page's DOM once loaded and then `after_ms` later (one read each), with JavaScript on or
/// off. Read over DevTools (`DOM.getDocument`, `DOM.getOuterHTML`, which run no script:
/// `--dump-dom` needs script, and dumps only at the load event).
async fn chromium_doms(url: &str, lang: &str, js: bool, after_ms: &[u64]) -> Vec<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let profile = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut child = tokio::process::Command::new(chromium())
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-sync"])
        .arg(format!("--blink-settings=scriptEnabled={js}"))
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--lang={lang}"))
        .arg(format!("--accept-lang={lang}"))
        .arg(format!("--remote-debugging-port={port}"))
        .arg(url)
        .env("LANGUAGE", lang)
        .kill_on_drop(true)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {} ({e})", chromium()));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    // The page's DevTools socket, once it has loaded (its title comes from the server).
    let ws = loop {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            let r = get(&format!("http://127.0.0.1:{port}/json/list"), &[]).await;
            if r.status == 200
                && let Some(p) = r.json().as_array().and_then(|a| {
                    a.iter().find(|p| p["type"] == "page" && p["title"].as_str().is_some_and(|t| t.contains('·'))).cloned()
                })
            {
                break p["webSocketDebuggerUrl"].as_str().unwrap().to_owned();
            }
        }
        assert!(std::time::Instant::now() < deadline, "the page did not load within 30 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let path = ws.split_once(&format!("127.0.0.1:{port}")).map(|(_, p)| p.to_owned()).unwrap();
    let mut sock = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    sock.write_all(
        format!(
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        head.push(sock.read_u8().await.unwrap());
    }
    assert!(head.starts_with(b"HTTP/1.1 101"), "{}", String::from_utf8_lossy(&head));
    // One DevTools call: a masked text frame out, frames in until the answer with this id.
    async fn call(sock: &mut tokio::net::TcpStream, id: u64, method: &str, params: serde_json::Value) -> serde_json::Value {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let msg = serde_json::json!({"id": id, "method": method, "params": params}).to_string().into_bytes();
        let mut frame = vec![0x81u8];
        match msg.len() {
            n if n < 126 => frame.push(0x80 | n as u8),
            n => {
                frame.push(0x80 | 126);
                frame.extend_from_slice(&(n as u16).to_be_bytes());
            }
        }
        frame.extend_from_slice(&[0, 0, 0, 0]); // a zero mask leaves the payload as it is
        frame.extend_from_slice(&msg);
        sock.write_all(&frame).await.unwrap();
        loop {
            let mut h = [0u8; 2];
            sock.read_exact(&mut h).await.unwrap();
            let len = match h[1] & 0x7f {
                126 => u64::from(sock.read_u16().await.unwrap()),
                127 => sock.read_u64().await.unwrap(),
                n => u64::from(n),
            };
            let mut body = vec![0u8; len as usize];
            sock.read_exact(&mut body).await.unwrap();
            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&body)
                && v["id"] == id
            {
                return v;
            }
        }
    }
    let mut doms = Vec::new();
    let mut id = 0;
    for wait in after_ms {
        tokio::time::sleep(Duration::from_millis(*wait)).await;
        id += 2;
        let doc = call(&mut sock, id, "DOM.getDocument", serde_json::json!({"depth": 0})).await;
        let root = doc["result"]["root"]["nodeId"].as_u64().unwrap_or_else(|| panic!("{doc}"));
        let html = call(&mut sock, id + 1, "DOM.getOuterHTML", serde_json::json!({"nodeId": root})).await;
        doms.push(html["result"]["outerHTML"].as_str().unwrap_or_else(|| panic!("{html}")).to_owned());
    }
    let _ = child.kill().await;
    doms
}

/// The room of the tests below: `rate` admissions a second, opening at `opens_at` (RFC 3339) when
/// given.
fn room_edge(origin: &TestUpstream, rate: f64, opens_at: Option<&str>) -> TestEdge {
    let schedule = opens_at.map_or(String::new(), |o| format!("schedule = {{ opens-at = \"{o}\" }}\n"));
    TestEdge::start(&format!(
        "origin = \"{}\"\n[tokens]\nissuer = \"wicket\"\nsigning-kid = \"hs-1\"\n[[tokens.keys]]\nkid = \"hs-1\"\nalg = \"HS256\"\n\
         secret = \"{HS_SECRET}\"\n[[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy/ev-1\"\nprotected = [\"/buy/ev-1\"]\n\
         release = {{ mode = \"fixed\", rate = {rate:?} }}\n{schedule}",
        origin.url()
    ))
}

/// The queue page in each of its five languages, chosen by the browser's languages or `?lang=`:
/// the script renders a live status with the language's catalogue (the title is set from each
/// status), and the page says which language it is in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_queue_page_in_five_languages_from_accept_language_or_lang() {
    let origin = TestUpstream::start("origin").await;
    let edge = room_edge(&origin, 0.0, None);
    get(&edge.url("/queue/r1"), &[("accept", "application/json"), ("user-agent", "first")]).await;
    let url = edge.url("/queue/r1");
    for (browser, tag, title, ahead) in [
        ("zh-CN", "zh-CN", "您正在排队 · 排队中", "您前面还有"),
        ("zh-TW", "zh-TW", "您正在排隊 · 排隊中", "您前面還有"),
        ("en-US", "en", "You are in line · Waiting room", "People ahead of you"),
        ("ja", "ja", "順番待ちをしています · 順番待ち", "あなたの前の人数"),
        ("ko-KR", "ko", "대기 중입니다 · 대기열", "내 앞의 대기 인원"),
    ] {
        let (_, seen) = chromium_until(&url, browser, |_, t| t == title).await;
        assert_eq!(seen, title, "{browser}");
        let dom = chromium_run(&url, browser, 4000, None).await;
        assert!(dom.contains(&format!("lang=\"{tag}\"")) && dom.contains(ahead), "{browser}: {dom}");
        assert!(dom.contains(&format!("hreflang=\"{tag}\" aria-current=\"true\"")), "{browser}: {dom}");
        chromium_run(&url, browser, 4000, Some(&artifacts().join(format!("queue-{tag}.png")))).await;
    }
    // ?lang= wins over the browser's languages.
    let (_, seen) = chromium_until(&format!("{url}?lang=ko"), "en-US", |_, t| t.contains('·')).await;
    assert_eq!(seen, "대기 중입니다 · 대기열");
    for tag in ["zh-CN", "zh-TW", "en", "ja", "ko"] {
        let len = std::fs::metadata(artifacts().join(format!("queue-{tag}.png"))).map(|m| m.len()).unwrap_or(0);
        assert!(len > 1000, "queue-{tag}.png: {len} bytes");
    }
}

/// With JavaScript off, the page a fan sees holds the real figures (people ahead, wait, an honest
/// slow rate), not "—", and refreshes itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_without_javascript_shows_real_figures() {
    let origin = TestUpstream::start("origin").await;
    // One person every 5 s, 20 people ahead: the browser waits.
    let edge = room_edge(&origin, 0.2, None);
    for i in 0..20 {
        get(&edge.url("/queue/r1"), &[("accept", "application/json"), ("user-agent", &format!("fan-{i}"))]).await;
    }
    let url = edge.url("/queue/r1");
    let dom = chromium_dom_without_js(&url, "en-US", None).await;
    let ahead = dom.split("<dd id=\"ahead\">").nth(1).and_then(|r| r.split('<').next()).unwrap_or_default().to_owned();
    let n: u64 = ahead.parse().unwrap_or_else(|_| panic!("people ahead is a number: {ahead:?} in {dom}"));
    assert!((1..=20).contains(&n), "{n}");
    assert!(!dom.contains(">—<") && !dom.contains("Your place"), "{dom}");
    assert!(dom.contains("<dd id=\"eta\">about "), "{dom}");
    assert!(dom.contains("Letting in about one person every 5 seconds"), "{dom}");
    assert!(!dom.contains("0 people a second"), "{dom}");
    assert!(dom.contains("http-equiv=\"refresh\""), "{dom}");
    assert!(!dom.contains("data-running"), "no script ran: {dom}");
    let dom = chromium_dom_without_js(&url, "zh-CN", Some(&artifacts().join("queue-nojs-zh-CN.png"))).await;
    assert!(dom.contains(" 人</dd>") && dom.contains("当前约每 5 秒放行 1 人"), "{dom}");
}

/// Before opening, the page counts down to the room's opening (the status's `opens_at`) on the
/// server's clock; without JavaScript it shows the time left and the opening time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_not_open_counts_down_to_the_opening() {
    let origin = TestUpstream::start("origin").await;
    let opens = time::OffsetDateTime::now_utc().unix_timestamp() + 3600;
    let opens_at = time::OffsetDateTime::from_unix_timestamp(opens).unwrap().format(&time::format_description::well_known::Rfc3339).unwrap();
    let edge = room_edge(&origin, 10.0, Some(&opens_at));
    let url = edge.url("/queue/r1");
    let v = get(&url, &[("accept", "application/json")]).await.json();
    assert_eq!((v["state"].as_str(), v["opens_at"].as_str()), (Some("not_open"), Some(opens_at.as_str())), "{v}");
    let countdown = |dom: &str| -> String {
        let after = dom.split("id=\"countdown\"").nth(1).unwrap_or_else(|| panic!("a countdown: {dom}"));
        after.split('>').nth(1).and_then(|r| r.split('<').next()).unwrap_or_default().to_owned()
    };
    // No JS: the time left, rendered by the server, and the opening time.
    let dom = chromium_dom_without_js(&url, "en-US", None).await;
    let left = countdown(&dom);
    assert!(left.starts_with("00:59:") || left == "01:00:00", "{left:?}");
    assert!(dom.contains("Opens at ") && dom.contains("Not open yet"), "{dom}");
    // JS: the script runs the countdown (and keeps it under the hour).
    chromium_run(&url, "ja", 4000, Some(&artifacts().join("queue-countdown-ja.png"))).await;
    let doms = chromium_doms(&url, "ja", true, &[1500, 2000]).await;
    for dom in &doms {
        assert!(dom.contains(&format!("data-running=\"{opens_at}\"")), "the script counts down: {dom}");
        assert!(countdown(dom).starts_with("00:59:"), "{:?}", countdown(dom));
        assert!(dom.contains("まだ開始前です") && dom.contains("開始まで"), "{dom}");
    }
    assert_ne!(countdown(&doms[0]), countdown(&doms[1]), "the countdown ticks");
}

/// A room with a proof-of-work check: the page solves it with static/pow.js (the one solver the
/// queue page and the edge's check page share), joins and shows a live status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_queue_page_solves_the_rooms_proof_of_work_with_pow_js() {
    let origin = TestUpstream::start("origin").await;
    let edge = TestEdge::start(&format!(
        "origin = \"{}\"\n[edge.bot.pow]\ndifficulty = 10\n[tokens]\nissuer = \"wicket\"\nsigning-kid = \"hs-1\"\n[[tokens.keys]]\nkid = \"hs-1\"\n\
         alg = \"HS256\"\nsecret = \"{HS_SECRET}\"\n[[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy/ev-1\"\n\
         protected = [\"/buy/ev-1\"]\nbot-check = \"pow\"\nrelease = {{ mode = \"fixed\", rate = 0.0 }}\n",
        origin.url()
    ));
    let url = edge.url("/queue/r1");
    // Without a solved check the page asks for it (the server cannot give a place yet).
    let page = get(&url, &[("accept", "text/html")]).await;
    assert!(page.text().contains("<meta name=\"wicket-bot-check\" content=\"pow\">") && page.text().contains("/wicket/pow.js"));
    let (_, title) = chromium_until(&url, "en-US", |_, t| t == "You are in line · Waiting room").await;
    assert_eq!(title, "You are in line · Waiting room");
}

/// The "busy" page (429) in the browser's language: zh-CN for a zh-CN browser (it was English only).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_busy_page_speaks_the_browsers_language() {
    let origin = TestUpstream::start("origin").await;
    let edge = TestEdge::start(&format!(
        "origin = \"{}\"\n[[edge.limits]]\npath = \"/\"\nkey = \"ip\"\nrate = \"1r/m\"\nburst = 0\nnodelay = true\n",
        origin.url()
    ));
    get(&edge.url("/"), &[]).await;
    for (lang, title) in [("zh-CN", "访问繁忙，请稍候"), ("ja", "混み合っています"), ("en-US", "Busy — please wait")] {
        let (_, seen) = chromium_until(&edge.url("/event"), lang, |_, t| !t.is_empty() && !t.starts_with("127.0.0.1")).await;
        assert_eq!(seen, title, "{lang}");
    }
}
