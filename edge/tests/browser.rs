//! A real headless Chromium (Debian's `chromium`) through a real edge: a protected URL sends the
//! browser to the queue page, which renders in any of its 17 languages from the browser's
//! language (or `?lang=`; Arabic and Persian right to left), waits, and once admitted goes to the target by itself; with JavaScript
//! off it shows the real figures the server rendered; before opening it counts down. The operator
//! console, driven through the DevTools protocol, signs in, charts a room and controls it, and
//! shows a room's post-sale report. Over
//! HTTPS (a test CA made here), the browser goes through the queue to the target on HTTP/2.
//! Screenshots are kept in target/test-artifacts/queue-*.png (queue-lang-<tag>.png: each
//! language), refusal-*.png, console-*.png and https-*.png.
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

/// The flags of every headless Chromium here: no sandbox (root in CI), no GPU, no QUIC, nothing
/// fetched in the background.
const HEADLESS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
];

/// Runs Chromium headless on `url` with `lang`; returns the DOM after `budget_ms` of page time
/// (and writes a screenshot when asked).
async fn chromium_run(url: &str, lang: &str, budget_ms: u64, screenshot: Option<&PathBuf>) -> String {
    chromium_run_with(url, lang, budget_ms, screenshot, &[]).await
}

/// [`chromium_run`] with extra Chromium flags (`--blink-settings=scriptEnabled=false`: no JS).
async fn chromium_run_with(url: &str, lang: &str, budget_ms: u64, screenshot: Option<&PathBuf>, extra: &[&str]) -> String {
    let profile = tempfile::tempdir().unwrap();
    let mut cmd = tokio::process::Command::new(chromium());
    cmd.args(HEADLESS).args(["--hide-scrollbars", "--window-size=412,915"])
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
        .args(HEADLESS)
        .arg("--window-size=412,915")
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
    let mut page = Cdp::launch_with(lang, &[&format!("--blink-settings=scriptEnabled={js}")]).await;
    page.events.clear();
    page.call("Page.navigate", serde_json::json!({"url": url})).await;
    page.event("Page.loadEventFired").await;
    let mut doms = Vec::new();
    for wait in after_ms {
        tokio::time::sleep(Duration::from_millis(*wait)).await;
        let doc = page.call("DOM.getDocument", serde_json::json!({"depth": 0})).await;
        let root = doc["root"]["nodeId"].as_u64().unwrap_or_else(|| panic!("{doc}"));
        let html = page.call("DOM.getOuterHTML", serde_json::json!({"nodeId": root})).await;
        doms.push(html["outerHTML"].as_str().unwrap_or_else(|| panic!("{html}")).to_owned());
    }
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

/// Every language of the queue page, for the screenshots: (tag, the waiting headline).
const LANGUAGES: [(&str, &str); 17] = [
    ("ar", "أنت في الطابور"),
    ("de", "Sie sind in der Warteschlange"),
    ("en", "You are in line"),
    ("es", "Estás en la fila"),
    ("fa", "شما در صف هستید"),
    ("fr", "Vous êtes dans la file d’attente"),
    ("id", "Anda sedang mengantre"),
    ("it", "Sei in coda"),
    ("ja", "順番待ちをしています"),
    ("ko", "대기 중입니다"),
    ("nl", "Je staat in de rij"),
    ("pl", "Jesteś w kolejce"),
    ("pt-BR", "Você está na fila"),
    ("ru", "Вы в очереди"),
    ("tr", "Sıradasınız"),
    ("zh-CN", "您正在排队"),
    ("zh-TW", "您正在排隊"),
];

/// A phone-sized viewport for [`Cdp`] screenshots (its window is desktop-sized).
async fn phone(page: &mut Cdp) {
    page.call(
        "Emulation.setDeviceMetricsOverride",
        serde_json::json!({"width": 412, "height": 915, "deviceScaleFactor": 1, "mobile": true}),
    )
    .await;
}

/// The queue page in Arabic and Persian, chosen by the browser's language: `<html dir="rtl">`,
/// the text in Arabic or Persian script, and the layout mirrored (the event name at the right,
/// the language switcher at the left, its list opening inwards, within the screen).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_queue_page_right_to_left_in_arabic_and_persian() {
    let origin = TestUpstream::start("origin").await;
    let edge = room_edge(&origin, 0.0, None);
    get(&edge.url("/queue/r1"), &[("accept", "application/json"), ("user-agent", "first")]).await;
    let url = edge.url("/queue/r1");
    for (browser, tag, headline, ahead) in [
        ("ar-EG", "ar", "أنت في الطابور", "عدد الأشخاص أمامك"),
        ("fa-IR", "fa", "شما در صف هستید", "افراد جلوتر از شما"),
    ] {
        let mut page = Cdp::launch(browser).await;
        phone(&mut page).await;
        page.navigate(&url).await;
        // The script has rendered a live status (one person ahead) in the page's language.
        page.until("document.getElementById('queue').dataset.state === 'waiting' && document.getElementById('ahead').textContent.length > 0", 10.0, tag)
            .await;
        let seen = page
            .eval(
                "JSON.stringify([document.documentElement.lang, document.documentElement.dir, getComputedStyle(document.body).direction,                 document.getElementById('headline').textContent, document.querySelector('#ahead-box dt').textContent, document.title])",
            )
            .await;
        let seen: Vec<String> = serde_json::from_str(seen.as_str().unwrap()).unwrap();
        assert_eq!(seen[..5], [tag, "rtl", "rtl", headline, ahead], "{browser}: {seen:?}");
        assert!(seen[5].starts_with(headline), "{seen:?}");
        let dom = chromium_run(&url, browser, 3000, None).await;
        assert!(dom.contains(&format!("<html lang=\"{tag}\" dir=\"rtl\">")), "{browser}: {dom}");
        // Mirrored: the brand line at the right, the switcher at the left.
        let mirrored = page
            .eval("document.querySelector('.brand-line').getBoundingClientRect().left > document.querySelector('.lang').getBoundingClientRect().right")
            .await;
        assert_eq!(mirrored, true, "{browser}: brand right of the switcher");
        page.screenshot(&format!("queue-rtl-{tag}.png")).await;
        // The switcher opens inwards, lists all 17 languages, and stays on the screen.
        page.eval("document.querySelector('.lang summary').click()").await;
        let list = page
            .until(
                "(() => { const r = document.querySelector('.lang-list').getBoundingClientRect();                 return r.width > 0 && JSON.stringify([r.left, r.right, innerWidth, document.querySelectorAll('.lang-list a').length]); })()",
                5.0,
                "the language list",
            )
            .await;
        let list: Vec<f64> = serde_json::from_str(list.as_str().unwrap()).unwrap();
        assert!(list[0] >= 0.0 && list[1] <= list[2] && list[3] == 17.0, "{browser}: list at {list:?}");
        page.screenshot(&format!("queue-rtl-{tag}-languages.png")).await;
    }
}

/// A screenshot of the queue page in each of its 17 languages (target/test-artifacts/
/// queue-lang-<tag>.png), chosen by `?lang=`: each in its language and direction, with the
/// switcher marking it. One browser for all, so it stays within a minute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_queue_page_screenshot_in_each_of_17_languages() {
    let origin = TestUpstream::start("origin").await;
    let edge = room_edge(&origin, 0.0, None);
    // 1,234 people ahead: a figure with a thousands separator, in each language's grouping.
    for i in 0..1234 {
        get(&edge.url("/queue/r1"), &[("accept", "application/json"), ("user-agent", &format!("fan-{i}"))]).await;
    }
    let url = edge.url("/queue/r1");
    let mut page = Cdp::launch("en-US").await;
    phone(&mut page).await;
    let started = std::time::Instant::now();
    for (tag, headline) in LANGUAGES {
        page.navigate(&format!("{url}?lang={tag}")).await;
        page.until(
            &format!("document.documentElement.lang === {tag:?} && document.getElementById('queue').dataset.state === 'waiting' && document.title.includes('·')"),
            10.0,
            tag,
        )
        .await;
        let seen = page
            .eval("JSON.stringify([document.documentElement.dir, document.getElementById('headline').textContent, document.querySelector('.lang a[aria-current]').hreflang])")
            .await;
        let seen: Vec<String> = serde_json::from_str(seen.as_str().unwrap()).unwrap();
        let dir = if matches!(tag, "ar" | "fa") { "rtl" } else { "ltr" };
        assert_eq!(seen, [dir, headline, tag], "{tag}");
        page.screenshot(&format!("queue-lang-{tag}.png")).await;
    }
    assert!(started.elapsed() < Duration::from_secs(60), "17 pages took {:?}", started.elapsed());
    for (tag, _) in LANGUAGES {
        let len = std::fs::metadata(artifacts().join(format!("queue-lang-{tag}.png"))).map(|m| m.len()).unwrap_or(0);
        assert!(len > 1000, "queue-lang-{tag}.png: {len} bytes");
    }
}

/// The edge's own HTML refusal (here the 429 "busy" page) in Arabic and Persian is right to left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_refusal_page_in_arabic_is_right_to_left() {
    let origin = TestUpstream::start("origin").await;
    let edge = TestEdge::start(&format!(
        "origin = \"{}\"\n[[edge.limits]]\npath = \"/\"\nkey = \"ip\"\nrate = \"1r/m\"\nburst = 0\nnodelay = true\n",
        origin.url()
    ));
    get(&edge.url("/"), &[]).await;
    let mut page = Cdp::launch("ar").await;
    phone(&mut page).await;
    for (query, tag, title) in [("", "ar", "ضغط كبير — يُرجى الانتظار"), ("?lang=fa", "fa", "شلوغ است — لطفاً صبر کنید")] {
        page.navigate(&edge.url(&format!("/event{query}"))).await;
        let seen = page
            .eval("JSON.stringify([document.documentElement.lang, document.documentElement.dir, getComputedStyle(document.body).direction, document.title])")
            .await;
        let seen: Vec<String> = serde_json::from_str(seen.as_str().unwrap()).unwrap();
        assert_eq!(seen, [tag, "rtl", "rtl", title], "{query}");
        page.screenshot(&format!("refusal-429-{tag}.png")).await;
    }
}

/// A Chrome DevTools Protocol connection to one page (a minimal WebSocket client: text frames,
/// masked as a client's must be; events kept until asked for).
struct Cdp {
    ws: tokio::io::BufReader<tokio::net::TcpStream>,
    next_id: u64,
    events: Vec<serde_json::Value>,
    _chromium: tokio::process::Child,
    _profile: tempfile::TempDir,
}

impl Cdp {
    /// Starts headless Chromium (a desktop-sized window) on about:blank and connects to its page.
    async fn launch(lang: &str) -> Self {
        Self::launch_with(lang, &[]).await
    }

    /// [`Cdp::launch`] with more Chromium flags.
    async fn launch_with(lang: &str, extra: &[&str]) -> Self {
        let profile = tempfile::tempdir().unwrap();
        let port = free_port();
        let chromium = tokio::process::Command::new(chromium())
            .args(HEADLESS)
            .args(["--hide-scrollbars", "--window-size=1400,1100"])
            .args(extra)
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(format!("--lang={lang}"))
            .arg(format!("--accept-lang={lang}"))
            .arg(format!("--remote-debugging-port={port}"))
            .arg("about:blank")
            .env("LANGUAGE", lang)
            .env("LANG", "C.UTF-8")
            .kill_on_drop(true)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {} ({e}): install the Debian packages chromium and fonts-noto-cjk", chromium()));
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let ws_url = loop {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                let r = get(&format!("http://127.0.0.1:{port}/json/list"), &[]).await;
                if r.status == 200
                    && let Some(u) = r.json().as_array().and_then(|a| a.iter().find(|p| p["type"] == "page")).and_then(|p| p["webSocketDebuggerUrl"].as_str())
                {
                    break u.to_owned();
                }
            }
            assert!(std::time::Instant::now() < deadline, "no DevTools page within 30 s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let path = ws_url.split_once("/devtools/").map(|(_, p)| format!("/devtools/{p}")).unwrap();
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        stream
            .write_all(
                format!(
                    "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                     Sec-WebSocket-Key: d2lja2V0LWNvbnNvbGUtdGVzdA==\r\nSec-WebSocket-Version: 13\r\n\r\n"
                )
                .as_bytes(),
            )
            .await
            .unwrap();
        // The handshake's answer, byte by byte so no frame byte is read with it.
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            head.push(stream.read_u8().await.unwrap());
        }
        assert!(head.starts_with(b"HTTP/1.1 101"), "{}", String::from_utf8_lossy(&head));
        let mut cdp = Cdp { ws: tokio::io::BufReader::new(stream), next_id: 0, events: Vec::new(), _chromium: chromium, _profile: profile };
        cdp.call("Page.enable", serde_json::json!({})).await;
        cdp.call("Runtime.enable", serde_json::json!({})).await;
        cdp
    }

    async fn send(&mut self, text: &str) {
        use tokio::io::AsyncWriteExt;
        let n = text.len();
        let mut f = vec![0x81u8];
        match n {
            0..=125 => f.push(0x80 | n as u8),
            126..=65535 => {
                f.push(0x80 | 126);
                f.extend((n as u16).to_be_bytes());
            }
            _ => {
                f.push(0x80 | 127);
                f.extend((n as u64).to_be_bytes());
            }
        }
        let mask: [u8; 4] = rand::random();
        f.extend(mask);
        f.extend(text.bytes().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        self.ws.get_mut().write_all(&f).await.unwrap();
    }

    /// The next whole message (answering pings).
    async fn message(&mut self) -> serde_json::Value {
        use tokio::io::AsyncReadExt;
        let mut msg = Vec::new();
        loop {
            let (b0, b1) = (self.ws.read_u8().await.unwrap(), self.ws.read_u8().await.unwrap());
            let mut len = u64::from(b1 & 0x7f);
            if len == 126 {
                len = u64::from(self.ws.read_u16().await.unwrap());
            } else if len == 127 {
                len = self.ws.read_u64().await.unwrap();
            }
            let mask = if b1 & 0x80 != 0 { Some(self.ws.read_u32().await.unwrap().to_be_bytes()) } else { None };
            let mut payload = vec![0u8; len as usize];
            self.ws.read_exact(&mut payload).await.unwrap();
            if let Some(m) = mask {
                payload.iter_mut().enumerate().for_each(|(i, b)| *b ^= m[i % 4]);
            }
            match b0 & 0x0f {
                0x8 => panic!("DevTools closed the connection"),
                0x9 => {
                    use tokio::io::AsyncWriteExt;
                    let mask: [u8; 4] = rand::random();
                    let mut f = vec![0x8a, 0x80 | payload.len() as u8];
                    f.extend(mask);
                    f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
                    self.ws.get_mut().write_all(&f).await.unwrap();
                }
                0xa => {}
                _ => {
                    msg.extend_from_slice(&payload);
                    if b0 & 0x80 != 0 {
                        return serde_json::from_slice(&msg).unwrap();
                    }
                }
            }
        }
    }

    /// One command; its result (events that come first are kept).
    async fn call(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&serde_json::json!({"id": id, "method": method, "params": params}).to_string()).await;
        loop {
            let m = tokio::time::timeout(Duration::from_secs(30), self.message()).await.unwrap_or_else(|_| panic!("{method}: no answer in 30 s"));
            if m["id"] == id {
                assert!(m.get("error").is_none(), "{method}: {m}");
                return m["result"].clone();
            }
            self.events.push(m);
        }
    }

    /// The value of a JavaScript expression in the page (promises awaited).
    async fn eval(&mut self, expr: &str) -> serde_json::Value {
        let r = self.call("Runtime.evaluate", serde_json::json!({"expression": expr, "awaitPromise": true, "returnByValue": true})).await;
        assert!(r.get("exceptionDetails").is_none(), "{expr}: {r}");
        r["result"]["value"].clone()
    }

    /// The value of `expr`, or why the page could not answer (it is between two documents: its
    /// context was just destroyed, or the expression threw).
    async fn try_eval(&mut self, expr: &str) -> Result<serde_json::Value, String> {
        self.next_id += 1;
        let id = self.next_id;
        let params = serde_json::json!({"expression": expr, "awaitPromise": true, "returnByValue": true});
        self.send(&serde_json::json!({"id": id, "method": "Runtime.evaluate", "params": params}).to_string()).await;
        loop {
            let m = tokio::time::timeout(Duration::from_secs(30), self.message()).await.expect("Runtime.evaluate: no answer in 30 s");
            if m["id"] == id {
                if m.get("error").is_some() || m["result"].get("exceptionDetails").is_some() {
                    return Err(m.to_string());
                }
                return Ok(m["result"]["result"]["value"].clone());
            }
            self.events.push(m);
        }
    }

    /// The value of `expr`, or `None` when the page could not answer (it is between two documents:
    /// its context was just destroyed).
    async fn eval_between_pages(&mut self, expr: &str) -> Option<serde_json::Value> {
        self.try_eval(expr).await.ok()
    }

    /// Waits (up to `secs`) until `expr` is truthy in the page; its value then. A page between two
    /// documents (a navigation or a form's answer on the way) is asked again; the last error is
    /// named if the time runs out.
    async fn until(&mut self, expr: &str, secs: f64, what: &str) -> serde_json::Value {
        let deadline = std::time::Instant::now() + Duration::from_secs_f64(secs);
        loop {
            let last = match self.try_eval(expr).await {
                Ok(v) if !(v.is_null() || v == false || v == 0 || v == "") => return v,
                Ok(v) => v.to_string(),
                Err(e) => e,
            };
            assert!(std::time::Instant::now() < deadline, "{what}: not within {secs} s (last: {last})");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits for the event `method` (up to 10 s) and takes it.
    async fn event(&mut self, method: &str) -> serde_json::Value {
        if let Some(i) = self.events.iter().position(|e| e["method"] == method) {
            return self.events.remove(i);
        }
        loop {
            let m = tokio::time::timeout(Duration::from_secs(10), self.message()).await.unwrap_or_else(|_| panic!("no {method} in 10 s"));
            if m["method"] == method {
                return m;
            }
            self.events.push(m);
        }
    }

    async fn navigate(&mut self, url: &str) {
        self.call("Page.navigate", serde_json::json!({"url": url})).await;
        self.until("document.readyState === 'complete' && location.href !== 'about:blank'", 10.0, url).await;
    }

    /// Writes a PNG of the page to the test's output folder.
    async fn screenshot(&mut self, name: &str) {
        use base64::Engine;
        let r = self.call("Page.captureScreenshot", serde_json::json!({"format": "png"})).await;
        let png = base64::engine::general_purpose::STANDARD.decode(r["data"].as_str().unwrap()).unwrap();
        assert!(png.len() > 1000, "{name}: {} bytes", png.len());
        std::fs::write(artifacts().join(name), png).unwrap();
    }
}

/// JavaScript: the room card's button labelled `label`.
fn room_button(label: &str) -> String {
    format!("[...document.querySelectorAll('[data-room=\"r1\"] button')].find(b => b.textContent === {label:?})")
}

/// The operator console in a real browser, end to end: a wrong token is refused; signed in, the
/// four charts of the room fill within 3 s; cancelling the confirmation of queue-all or pause
/// changes nothing, confirming a pause makes a fan's status say `paused`; a fixed rate set in the
/// page is what the measured rate follows; the schedule control moves the opening; a cross-site
/// POST with the session cookie is refused; an IP added to the blocklist is refused. Screenshots:
/// target/test-artifacts/console-*.png.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_the_console_signs_in_charts_and_controls_a_room() {
    let edge = TestEdge::start(&format!(
        "[tokens]\nissuer = \"wicket\"\nsigning-kid = \"hs-1\"\n[[tokens.keys]]\nkid = \"hs-1\"\nalg = \"HS256\"\nsecret = \"{HS_SECRET}\"\n\
         [[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy/ev-1\"\nprotected = [\"/buy/ev-1\"]\n\
         release = {{ mode = \"fixed\", rate = 0.0 }}\n"
    ));
    let base = format!("http://{}", edge.addr);
    // A queue to release: 200 fans; the last one is watched.
    let mut fans = Vec::new();
    for _ in 0..200 {
        let mut fan = Fan::default();
        assert_eq!(fan.join(&base, "r1").await.status, 200);
        fans.push(fan);
    }
    let mut last = fans.pop().unwrap();
    assert_eq!(last.status(&base, "r1").await["state"], "waiting");
    let mode = || async { edge.admin("GET", "/admin/rooms/r1/stats", "").await.json()["mode"].clone() };

    let mut page = Cdp::launch("en-US").await;
    page.navigate(&edge.admin_url("/")).await;
    page.until("!document.getElementById('signin').hidden", 5.0, "the sign-in form").await;
    page.screenshot("console-sign-in.png").await;
    // A wrong token: refused, said in place, no session.
    page.eval("document.getElementById('token').value = 'not-the-token'; document.getElementById('signin').requestSubmit(); true").await;
    let said = page.until("document.getElementById('signin-msg').textContent", 5.0, "the refusal").await;
    assert!(said.as_str().unwrap().contains("Wrong token") && said.as_str().unwrap().contains("401"), "{said}");
    assert_eq!(page.eval("document.getElementById('app').hidden").await, true);
    page.screenshot("console-wrong-token.png").await;
    // The right one: the room's four charts fill within 3 s.
    page.eval(&format!("document.getElementById('token').value = {ADMIN_TOKEN:?}; document.getElementById('signin').requestSubmit(); true")).await;
    let charts = "(() => { const c = [...document.querySelectorAll('[data-room=\"r1\"] [data-points]')]; \
                  return c.length === 4 && c.every(e => Number(e.dataset.points) >= 2); })()";
    page.until(charts, 3.0, "four charts with two points each").await;
    assert_eq!(page.eval("getComputedStyle(document.getElementById('signin')).display").await, "none", "the sign-in form is gone");
    assert_eq!(page.eval("document.querySelectorAll('[data-room=\"r1\"] canvas').length >= 4").await, true);
    page.screenshot("console-signed-in.png").await;

    // Queue-all and pause ask first; cancelling changes nothing.
    for label in ["Queue all", "Pause"] {
        page.eval(&format!("setTimeout(() => {}.click(), 0); true", room_button(label))).await;
        let dialog = page.event("Page.javascriptDialogOpening").await;
        assert_eq!(dialog["params"]["type"], "confirm", "{dialog}");
        assert!(dialog["params"]["message"].as_str().unwrap().contains("r1"), "{dialog}");
        page.call("Page.handleJavaScriptDialog", serde_json::json!({"accept": false})).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(mode().await, serde_json::json!({"fixed": 0.0}), "{label} cancelled");
    }
    // Confirmed: paused, the server's answer in place, and the fan is told.
    page.eval(&format!("setTimeout(() => {}.click(), 0); true", room_button("Pause"))).await;
    page.event("Page.javascriptDialogOpening").await;
    page.call("Page.handleJavaScriptDialog", serde_json::json!({"accept": true})).await;
    let said = page.until("document.querySelector('[data-room=\"r1\"] .msg.ok')?.textContent", 5.0, "the pause's answer").await;
    assert!(said.as_str().unwrap().contains("paused"), "{said}");
    assert_eq!(last.status(&base, "r1").await["state"], "paused");
    page.until("document.querySelector('[data-room=\"r1\"] .fig b').textContent === 'paused'", 3.0, "the mode figure").await;
    page.screenshot("console-paused.png").await;
    // Resume (no question asked), then a fixed rate of 5/s: the measured rate follows.
    page.eval(&format!("{}.click(); true", room_button("Resume"))).await;
    page.until("document.querySelector('[data-room=\"r1\"] .msg.ok')?.textContent.startsWith('Resume')", 5.0, "the resume's answer").await;
    assert_eq!(last.status(&base, "r1").await["state"], "waiting");
    page.eval(
        "(() => { const card = document.querySelector('[data-room=\"r1\"]'); card.querySelector('select').value = 'fixed'; \
         card.querySelector('input[placeholder=\"rate\"]').value = '5'; return true; })()",
    )
    .await;
    page.eval(&format!("{}.click(); true", room_button("Apply"))).await;
    let said = page.until("document.querySelector('[data-room=\"r1\"] .msg.ok')?.textContent.startsWith('Apply') && document.querySelector('[data-room=\"r1\"] .msg.ok').textContent", 5.0, "the rate's answer").await;
    assert!(said.as_str().unwrap().contains("fixed 5/s"), "{said}");
    // The release figure reads "set / measured".
    let figure = "(() => { const f = [...document.querySelectorAll('[data-room=\"r1\"] .fig')].find(f => f.querySelector('span').textContent.startsWith('release')); \
                  const [set, measured] = f.querySelector('b').textContent.split(' / ').map(Number); \
                  return set === 5 && measured >= 3.5 && measured <= 6.5 && f.querySelector('b').textContent; })()";
    let seen = page.until(figure, 12.0, "the measured rate follows the fixed rate").await;
    let serving = edge.admin("GET", "/admin/rooms/r1/stats", "").await.json()["serving"].as_u64().unwrap();
    assert!(serving > 0, "the queue moved: {seen}");
    page.screenshot("console-fixed-rate.png").await;

    // The schedule control: an opening in the future tells fans when; cleared, they wait again.
    page.eval(
        "(() => { const card = document.querySelector('[data-room=\"r1\"]'); \
         card.querySelector('input[title=\"opens at\"]').value = '2099-01-01T10:00:00'; \
         [...card.querySelectorAll('.schedule button')][0].click(); return true; })()",
    )
    .await;
    let said = page.until("[...document.querySelectorAll('[data-room=\"r1\"] .msg')].map(m => m.textContent).find(t => t.startsWith('Schedule'))", 5.0, "the schedule's answer").await;
    assert!(said.as_str().unwrap().contains("Saved"), "{said}");
    let s = last.status(&base, "r1").await;
    assert_eq!(s["state"], "not_open", "{s}");
    assert!(s["opens_at"].as_str().unwrap().starts_with("2099-01-01T"), "{s}");
    page.screenshot("console-schedule.png").await;
    // A time the server refuses is said in place and changes nothing.
    page.eval(
        "(() => { const card = document.querySelector('[data-room=\"r1\"]'); \
         card.querySelector('input[title=\"closes at\"]').value = '2098-01-01T10:00:00'; \
         [...card.querySelectorAll('.schedule button')][0].click(); return true; })()",
    )
    .await;
    let said = page.until("[...document.querySelectorAll('[data-room=\"r1\"] .msg.err')].map(m => m.textContent).find(t => t.startsWith('Schedule'))", 5.0, "the schedule's refusal").await;
    assert!(said.as_str().unwrap().contains("400"), "{said}");
    assert_eq!(last.status(&base, "r1").await["state"], "not_open");
    page.eval(
        "(() => { const card = document.querySelector('[data-room=\"r1\"]'); \
         for (const i of card.querySelectorAll('.schedule input')) i.value = ''; \
         [...card.querySelectorAll('.schedule button')][0].click(); return true; })()",
    )
    .await;
    page.until("[...document.querySelectorAll('[data-room=\"r1\"] .msg.ok')].some(m => m.textContent.startsWith('Schedule'))", 5.0, "the cleared schedule").await;
    assert_ne!(last.status(&base, "r1").await["state"], "not_open");

    // A cross-site POST: a page on another origin (the public port) posts to the admin port with
    // the browser's cookies, as a form and as a fetch. Refused; nothing changes.
    let before = mode().await;
    page.navigate(&format!("{base}/")).await;
    let admin = edge.admin_url("/admin/rooms/r1/queue-all");
    page.eval(&format!("fetch({admin:?}, {{method: 'POST', mode: 'no-cors', credentials: 'include', body: 'x'}}).then(() => 'sent', e => String(e))")).await;
    page.eval(&format!(
        "(() => {{ const f = document.createElement('form'); f.method = 'POST'; f.action = {:?}; document.body.append(f); f.submit(); return true; }})()",
        edge.admin_url("/admin/rooms/r1/pause")
    ))
    .await;
    let refused = page
        .until("location.href.includes('/admin/rooms/r1/pause') && document.readyState === 'complete' && document.body.innerText", 10.0, "the form's answer")
        .await;
    // Another port of the same host is the same site, so the browser sends the cookie: it is the
    // missing CSRF token (and the foreign origin) that the admin port refuses.
    let refused = refused.as_str().unwrap();
    assert!(refused.contains("\"forbidden\""), "{refused}");
    page.screenshot("console-cross-site-refused.png").await;
    assert_eq!(mode().await, before, "the cross-site POSTs changed nothing");

    // Back to the console (still signed in): block this machine's IP; a fan from it is refused.
    page.navigate(&edge.admin_url("/")).await;
    page.until("!document.getElementById('app').hidden", 5.0, "the console, still signed in").await;
    page.eval("document.getElementById('block-value').value = '127.0.0.1'; document.getElementById('block-form').requestSubmit(); true").await;
    page.until("document.getElementById('block-msg').textContent === 'Saved' && document.getElementById('block-list').textContent.includes('ips: 127.0.0.1')", 5.0, "the blocklist").await;
    let r = get(&edge.url("/queue/r1"), &[("accept", "application/json")]).await;
    assert_eq!(r.status, 403, "{}", r.text());
    page.screenshot("console-blocklist.png").await;
    for f in ["sign-in", "wrong-token", "signed-in", "paused", "fixed-rate", "schedule", "cross-site-refused", "blocklist"] {
        assert!(artifacts().join(format!("console-{f}.png")).exists(), "{f}");
    }
}

/// The console's report view in a real browser: after a small sale (three fans let in, one of
/// them buying, two requests refused without a token), a room card's "Report" button opens the
/// room's report: its totals as the API gives them, four per-minute charts and a CSV link that
/// downloads the same minutes; in zh-CN too. Screenshots: target/test-artifacts/console-report*.png.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_the_console_shows_a_rooms_report_with_charts_and_its_csv() {
    let origin = TestUpstream::start("origin").await;
    let edge = TestEdge::start(&format!(
        "origin = \"{}\"\n{}[[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy\"\nprotected = [\"/buy\"]\n\
         release = {{ mode = \"fixed\", rate = 1000.0 }}\n",
        origin.url(),
        hs_tokens()
    ));
    let base = format!("http://{}", edge.addr);
    let mut fans: Vec<Fan> = (0..3).map(|_| Fan::default()).collect();
    for fan in fans.iter_mut() {
        assert_eq!(fan.join(&base, "r1").await.status, 200);
        let deadline = std::time::Instant::now() + Duration::from_secs(8);
        while fan.status(&base, "r1").await["state"] != "admitted" {
            assert!(std::time::Instant::now() < deadline, "not admitted");
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    }
    let cookie = fans[0].jar.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("; ");
    assert_eq!(get(&format!("{base}/buy"), &[("cookie", &cookie), ("user-agent", "fan")]).await.status, 200);
    for _ in 0..2 {
        assert_eq!(get(&format!("{base}/buy"), &[("accept", "application/json")]).await.status, 403);
    }
    // What the API says (once flushed): the page must show the same.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let api = loop {
        let v = edge.admin("GET", "/admin/rooms/r1/report", "").await.json();
        let t = &v["totals"];
        if (t["joins"].as_u64(), t["admissions"].as_u64(), t["holds"].as_u64(), t["refusals"]["not_admitted"].as_u64()) == (Some(3), Some(3), Some(1), Some(2)) {
            break v;
        }
        assert!(std::time::Instant::now() < deadline, "the report: {v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let minutes = api["minutes"].as_array().unwrap().len();
    assert!(minutes >= 1, "{api}");

    let mut page = Cdp::launch("en-US").await;
    page.navigate(&edge.admin_url("/")).await;
    page.until("!document.getElementById('signin').hidden", 5.0, "the sign-in form").await;
    page.eval(&format!("document.getElementById('token').value = {ADMIN_TOKEN:?}; document.getElementById('signin').requestSubmit(); true")).await;
    page.until(&format!("!!{}", room_button("Report")), 5.0, "the room card's Report button").await;
    page.eval(&format!("{}.click(); true", room_button("Report"))).await;
    // (A minute may have begun since the API was read: the sessions still run, so the leader
    // writes its figures in it too.)
    let charts = format!(
        "(() => {{ const c = [...document.querySelectorAll('#report [data-points]')]; const n = Number(c[0]?.dataset.points); \
         return c.length === 5 && c.every(e => Number(e.dataset.points) === n) && n >= {minutes} && n <= {minutes} + 1 \
         && document.querySelectorAll('#report canvas').length >= 5 && n; }})()"
    );
    let shown = page.until(&charts, 5.0, "the report's five charts, one point a minute").await.as_u64().unwrap();
    assert_eq!(page.eval("document.querySelector('#report h2').textContent").await, "Report of r1");
    assert_eq!(
        page.eval("[...document.querySelectorAll('#report .u-title')].map(e => e.textContent)").await,
        serde_json::json!(["Per minute", "Drop-offs of each minute's fans", "Release rate set / measured (/s)", "Core P99 / target (ms)", "Wait (s)"])
    );
    let figures = page
        .eval("Object.fromEntries([...document.querySelectorAll('#report [data-figure]')].map(f => [f.dataset.figure, f.querySelector('b').textContent]))")
        .await;
    let t = &api["totals"];
    let p = |v: &serde_json::Value| v.as_u64().map_or("—".to_owned(), |n| n.to_string());
    let want = serde_json::json!({
        "joins": "3", "admissions": "3", "holds": "1", "released": p(&t["released"]), "unused": "2", "abandoned": p(&t["drop_offs"]["abandoned"]),
        "refusals": "2", "not_admitted": "2",
        "wait": format!("{} / {} / {}", p(&t["wait_seconds"]["p50"]), p(&t["wait_seconds"]["p90"]), p(&t["wait_seconds"]["p99"])),
        "sold_out_at": "—", "minutes": shown.to_string(),
    });
    assert_eq!(figures, want);
    // The CSV link downloads the same minutes (the console's session is enough to read it).
    let href = page.eval("document.querySelector('#report a[download]').getAttribute('href')").await;
    assert_eq!(href, "/admin/rooms/r1/report?format=csv");
    let csv = page.eval("fetch(document.querySelector('#report a[download]').href).then(r => r.text())").await;
    let csv = csv.as_str().unwrap();
    assert!(csv.starts_with("minute,joins,admissions,holds,released,"), "{csv}");
    let joins: u64 = csv.lines().skip(1).map(|l| l.split(',').nth(1).unwrap().parse::<u64>().unwrap()).sum();
    let rows = csv.lines().count() as u64 - 1;
    assert!((rows == shown || rows == shown + 1) && joins == 3, "{csv}");
    page.screenshot("console-report.png").await;
    // In Chinese: the same report, its labels translated.
    page.eval("localStorage.setItem('wicket-console-lang', 'zh-CN'); location.reload(); true").await;
    page.until(&format!("!!{}", room_button("报告")), 8.0, "the Report button in zh-CN").await;
    page.eval(&format!("{}.click(); true", room_button("报告"))).await;
    page.until("document.querySelectorAll('#report [data-points]').length === 5", 5.0, "the zh-CN report's charts").await;
    assert_eq!(page.eval("document.querySelector('#report h2').textContent").await, "r1 的报告");
    assert_eq!(page.eval("document.querySelector('#report [data-figure=\"joins\"]').textContent").await, "3加入");
    page.screenshot("console-report-zh-CN.png").await;
}

/// Over HTTPS with HTTP/2 (`[edge.tls]`, a certificate from a test CA made here): Chromium opens the
/// protected URL, is sent to the queue page, waits, is admitted and lands on the target, every page
/// over h2 (the navigation's `nextHopProtocol` and DevTools' `Network.responseReceived`). Chromium
/// trusts exactly the test certificate's key (`--ignore-certificate-errors-spki-list`, not
/// `--ignore-certificate-errors`); without it the same URL is a certificate error page. Screenshots:
/// target/test-artifacts/https-queue.png and https-target.png.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_over_https_goes_through_the_queue_to_the_target_on_h2() {
    let pki = wicket_testkit::pki::Pki::new();
    let (cert, key) = pki.leaf("a", &["a.test"], 30);
    let origin = TestUpstream::start("origin").await;
    let port = free_port();
    let edge = TestEdge::start(&format!(
        "origin = \"{}\"\n[edge.tls]\nlisten = \"127.0.0.1:{port}\"\n[[edge.tls.certs]]\ncert-file = \"{}\"\nkey-file = \"{}\"\n\
         [tokens]\nissuer = \"wicket\"\nsigning-kid = \"hs-1\"\n[[tokens.keys]]\nkid = \"hs-1\"\nalg = \"HS256\"\nsecret = \"{HS_SECRET}\"\n\
         [[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy/ev-1\"\nprotected = [\"/buy/ev-1\"]\n\
         release = {{ mode = \"fixed\", rate = 0.0 }}\n",
        origin.url(),
        cert.display(),
        key.display()
    ));
    // Someone ahead, so the browser waits.
    get(&edge.url("/queue/r1"), &[("accept", "application/json"), ("user-agent", "first")]).await;
    let url = format!("https://a.test:{port}/buy/ev-1");
    let resolve = "--host-resolver-rules=MAP a.test 127.0.0.1";
    // Not trusting the test CA: a certificate error page, no queue page.
    let mut untrusting = Cdp::launch_with("en-US", &[resolve]).await;
    untrusting.call("Page.navigate", serde_json::json!({"url": url})).await;
    let error = untrusting.until("location.href.startsWith('chrome-error:') && document.readyState === 'complete'", 15.0, "a certificate error").await;
    assert_eq!(error, true);
    drop(untrusting);
    // Trusting the test certificate's key.
    let spki = format!("--ignore-certificate-errors-spki-list={}", pki.spki_sha256(&cert));
    let mut page = Cdp::launch_with("en-US", &[resolve, &spki]).await;
    page.call("Network.enable", serde_json::json!({})).await;
    page.navigate(&url).await;
    let at = page.until("location.pathname === '/queue/r1' && document.title === 'You are in line · Waiting room' && location.href", 10.0, "the queue page").await;
    assert_eq!(at, format!("https://a.test:{port}/queue/r1"), "sent to the queue page");
    let protocol = "performance.getEntriesByType('navigation')[0].nextHopProtocol";
    assert_eq!(page.eval(protocol).await, "h2", "the queue page over h2");
    page.screenshot("https-queue.png").await;
    // The room releases: the page goes to the target by itself.
    let hits = origin.hits.load(std::sync::atomic::Ordering::SeqCst);
    let r = edge.admin("PUT", "/admin/rooms/r1/release", r#"{"mode":"fixed","rate":1000}"#).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let target = format!("https://a.test:{port}/buy/ev-1");
    // (The page leaves by itself: an evaluation may meet it between two documents.)
    let arrived = format!("location.href === {target:?} && document.readyState === 'complete'");
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while page.eval_between_pages(&arrived).await != Some(serde_json::Value::Bool(true)) {
        assert!(std::time::Instant::now() < deadline, "not at the target within 15 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(origin.hits.load(std::sync::atomic::Ordering::SeqCst) > hits, "the origin served the target");
    let text = page.eval("document.body.innerText").await;
    assert!(text.as_str().unwrap().contains("\"upstream\":\"origin\"") && text.as_str().unwrap().contains("/buy/ev-1"), "{text}");
    assert!(text.as_str().unwrap().contains(&format!("\"host\":\"a.test:{port}\"")), "the origin is told the host: {text}");
    assert_eq!(page.eval(protocol).await, "h2", "the target over h2");
    assert_eq!(page.eval("location.protocol").await, "https:");
    page.screenshot("https-target.png").await;
    // DevTools saw both documents arrive over h2, the target with 200.
    let responses: Vec<(String, u64, String)> = page
        .events
        .iter()
        .filter(|e| e["method"] == "Network.responseReceived" && e["params"]["type"] == "Document")
        .map(|e| {
            let r = &e["params"]["response"];
            (r["url"].as_str().unwrap_or_default().to_owned(), r["status"].as_u64().unwrap_or(0), r["protocol"].as_str().unwrap_or_default().to_owned())
        })
        .collect();
    assert!(responses.iter().any(|(u, s, p)| u.ends_with("/queue/r1") && *s == 200 && p == "h2"), "{responses:?}");
    assert!(responses.iter().any(|(u, s, p)| *u == target && *s == 200 && p == "h2"), "{responses:?}");
    assert!(responses.iter().all(|(_, _, p)| p == "h2"), "{responses:?}");
}

/// The console shows each room's page as a fan would see it (issue #28 item 3): signed in, the
/// preview beside the room's controls loads through the console session (the frame is allowed by
/// both pages' policies); `sold_out` in English reads left to right with the operator's words,
/// in Arabic right to left, with the page's stylesheet applied (inlined: the admin port serves no
/// `/static/`); the room's
/// counters are untouched. Screenshots: target/test-artifacts/console-preview-*.png.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_the_console_previews_the_sold_out_page_left_to_right_and_right_to_left() {
    let edge = TestEdge::start(&format!(
        "{}[edge.queue-page]\nevent-name = \"Summer Tour\"\n[edge.queue-page.text.en]\ndetail_sold_out = \"Every seat of the Summer Tour is gone.\"\n\
         [[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy/ev-1\"\nprotected = [\"/buy/ev-1\"]\n\
         release = {{ mode = \"fixed\", rate = 0.0 }}\n",
        hs_tokens()
    ));
    let mut page = Cdp::launch("en-US").await;
    page.navigate(&edge.admin_url("/")).await;
    page.until("!document.getElementById('signin').hidden", 5.0, "the sign-in form").await;
    page.eval(&format!("document.getElementById('token').value = {ADMIN_TOKEN:?}; document.getElementById('signin').requestSubmit(); true")).await;
    page.until("document.querySelector('[data-room=\"r1\"] iframe.preview')", 5.0, "the room's preview frame").await;
    // The frame's document (same origin: the console may read it), once it shows `want`.
    let frame = "document.querySelector('[data-room=\"r1\"] iframe.preview').contentDocument";
    let choose = |state: &str, lang: &str| {
        format!(
            "(() => {{ const c = document.querySelector('[data-room=\"r1\"]'); \
             const s = c.querySelector('select.pv-state'), l = c.querySelector('select.pv-lang'); \
             s.value = {state:?}; l.value = {lang:?}; l.dispatchEvent(new Event('change')); return true; }})()"
        )
    };
    // Waiting (the first view) in English, then sold out.
    page.until(&format!("{frame}?.querySelector('#queue')?.dataset.state === 'waiting'"), 10.0, "the waiting preview").await;
    page.eval(&choose("sold_out", "en")).await;
    // While the frame navigates its document can be there without an element yet: "not yet", not an error.
    let ready = |lang: &str| format!("{frame}?.documentElement?.lang === {lang:?} && {frame}?.querySelector('#queue')?.dataset.state === 'sold_out'");
    page.until(&ready("en"), 10.0, "the sold-out preview in English").await;
    let read = format!(
        "(() => {{ const d = {frame}; return {{ dir: d.documentElement.dir, headline: d.getElementById('headline').textContent, \
         detail: d.getElementById('detail').textContent, title: d.title, brand: d.body.textContent.includes('Summer Tour'), \
         styled: d.querySelectorAll('style').length > 0 && getComputedStyle(d.body).display === 'flex' }}; }})()"
    );
    let en = page.eval(&read).await;
    assert_eq!(en["dir"], "ltr", "{en}");
    assert_eq!(en["headline"], "Sold out", "{en}");
    assert_eq!(en["detail"], "Every seat of the Summer Tour is gone.", "the operator's words: {en}");
    assert_eq!((en["brand"].as_bool(), en["styled"].as_bool()), (Some(true), Some(true)), "{en}");
    page.screenshot("console-preview-sold-out-en.png").await;
    // Arabic: right to left, in Arabic.
    page.eval(&choose("sold_out", "ar")).await;
    page.until(&ready("ar"), 10.0, "the sold-out preview in Arabic").await;
    let ar = page.eval(&read).await;
    assert_eq!(ar["dir"], "rtl", "{ar}");
    assert_eq!(ar["headline"], "نفدت التذاكر", "{ar}");
    let side = page.eval(&format!("getComputedStyle({frame}.getElementById('headline')).direction")).await;
    assert_eq!(side, "rtl");
    page.screenshot("console-preview-sold-out-ar.png").await;
    // Nothing of the room changed.
    let s = edge.admin("GET", "/admin/rooms/r1/stats", "").await.json();
    assert_eq!((s["issued"].as_u64(), s["joins"].as_u64()), (Some(0), Some(0)), "{s}");
}

/// The opening time beside UTC (issue #28 item 6): without JavaScript the page also gives it at
/// the audience's offset (`[edge.queue-page] utc-offset`); with it, a fan in Tokyo reads it in
/// their own zone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_the_opening_time_in_the_fans_own_zone_and_without_javascript_at_the_audiences_offset() {
    let origin = TestUpstream::start("origin").await;
    let edge = TestEdge::start(&format!(
        "origin = \"{}\"\n{}[edge.queue-page]\nutc-offset = \"-05:00\"\n\
         [[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy/ev-1\"\nprotected = [\"/buy/ev-1\"]\n\
         schedule = {{ opens-at = \"2099-06-01T02:00:00Z\" }}\n",
        origin.url(),
        hs_tokens()
    ));
    let url = edge.url("/queue/r1");
    let dom = chromium_dom_without_js(&url, "en-US", None).await;
    assert!(dom.contains("Opens at 2099-06-01 02:00 (UTC)"), "{dom}");
    assert!(dom.contains(">2099-05-31 21:00 (UTC-05:00)</p>"), "{dom}");
    let mut page = Cdp::launch("en-US").await;
    page.call("Emulation.setTimezoneOverride", serde_json::json!({"timezoneId": "Asia/Tokyo"})).await;
    page.navigate(&url).await;
    let local = page
        .until("(t => t.includes('+09:00') && t)(document.getElementById('opens-at-local').textContent)", 10.0, "the opening in the fan's zone")
        .await;
    assert_eq!(local, "2099-06-01 11:00 (UTC+09:00)");
    assert!(page.eval("document.getElementById('opens-at').textContent").await.as_str().unwrap().contains("(UTC)"), "UTC stays");
}

/// The invite lane in a real browser: the console shows a room's lane and generates codes (shown
/// once); a fan outside the lane gets the invite page in their language, a wrong code is said on
/// the page, and the generated code typed into its form takes the fan to the queue page with a
/// place. Screenshots: target/test-artifacts/invite-*.png.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_the_console_generates_invite_codes_and_a_fan_redeems_one_on_the_invite_page() {
    let edge = TestEdge::start(&format!(
        "[tokens]\nissuer = \"wicket\"\nsigning-kid = \"hs-1\"\n[[tokens.keys]]\nkid = \"hs-1\"\nalg = \"HS256\"\nsecret = \"{HS_SECRET}\"\n\
         [[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy/ev-1\"\nprotected = [\"/buy/ev-1\"]\n\
         release = {{ mode = \"fixed\", rate = 0.0 }}\ninvite = {{ only = true }}\n"
    ));
    let mut page = Cdp::launch("en-US").await;
    page.navigate(&edge.admin_url("/")).await;
    page.until("!document.getElementById('signin').hidden", 5.0, "the sign-in form").await;
    page.eval(&format!("document.getElementById('token').value = {ADMIN_TOKEN:?}; document.getElementById('signin').requestSubmit(); true")).await;
    let summary = "document.querySelector('[data-room=\"r1\"] .invite-summary')?.textContent";
    let said = page.until(summary, 5.0, "the room's invite lane").await;
    assert_eq!(said, "invite-only · codes 0 · redeemed 0 · allowlisted users 0");
    page.eval(
        "(() => { const row = document.querySelector('[data-room=\"r1\"] .invites'); row.querySelector('input[type=number]').value = '2'; \
         [...row.querySelectorAll('button')].find(b => b.textContent === 'Generate').click(); return true; })()",
    )
    .await;
    let codes = page.until("(() => { const o = document.querySelector('[data-room=\"r1\"] .invite-generated'); return !o.hidden && o.value; })()", 5.0, "the generated codes").await;
    let codes: Vec<String> = codes.as_str().unwrap().lines().map(str::to_owned).collect();
    assert_eq!(codes.len(), 2, "{codes:?}");
    page.until(&format!("{summary} === 'invite-only · codes 2 · redeemed 0 · allowlisted users 0'"), 7.0, "the new figures").await;
    page.screenshot("invite-console.png").await;
    let stored = edge.admin("GET", "/admin/rooms/r1/invites", "").await.json();
    assert_eq!((stored["codes"].as_u64(), stored["redeemed"].as_u64()), (Some(2), Some(0)));

    // A fan: the invite page (403) in English, then in German, with a form.
    page.navigate(&edge.url("/queue/r1")).await;
    assert_eq!(page.eval("document.querySelector('h1').textContent").await, "Invited fans only");
    assert_eq!(page.eval("document.querySelectorAll('form input[name=code]').length").await, 1);
    page.navigate(&edge.url("/queue/r1?lang=de")).await;
    assert_eq!(page.eval("document.querySelector('h1').textContent").await, "Nur für eingeladene Fans");
    page.screenshot("invite-page-de.png").await;
    page.navigate(&edge.url("/queue/r1?lang=en")).await;
    // A wrong code: the page again, saying so.
    page.eval("document.querySelector('input[name=code]').value = 'WRONG-CODE-0000'; document.querySelector('form').submit(); true").await;
    let said = page.until("document.readyState === 'complete' && document.querySelector('[role=alert]')?.textContent", 10.0, "the wrong code said").await;
    assert_eq!(said, "This code is not valid for this sale. Check it and try again.");
    page.screenshot("invite-wrong-code.png").await;
    // The generated code: on to the queue page, with a place.
    page.eval(&format!("document.querySelector('input[name=code]').value = {:?}; document.querySelector('form').submit(); true", codes[0].to_lowercase())).await;
    page.until("location.pathname === '/queue/r1' && document.readyState === 'complete' && !document.querySelector('form[action$=\"/invite\"]') && document.title", 10.0, "the queue page").await;
    let title = page.eval("document.querySelector('h1')?.textContent").await;
    assert_eq!(title, "You are in line", "the queue page");
    page.screenshot("invite-queued.png").await;
    let stored = edge.admin("GET", "/admin/rooms/r1/invites", "").await.json();
    assert_eq!(stored["redeemed"].as_u64(), Some(1));
    let stats = edge.admin("GET", "/admin/rooms/r1/stats", "").await.json();
    assert_eq!(stats["issued"].as_u64(), Some(1), "one place: the invitee's");
}

/// The console shows a room's invite lane and its share of the release (lane.js, loaded once a
/// room's stats carry `lane`; a room without a share shows none): the share, the lane places given
/// and those let in by the lane, as the room's stats say, and a chart of both. Three allowlisted
/// fans join the lane with nothing released; then a release of 4/s lets them in a quarter at a
/// time. Screenshots: console-lane.png, console-lane-zh-CN.png.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_the_console_shows_the_invite_lanes_share_of_the_release() {
    let edge = TestEdge::start(&format!(
        "user-header = \"x-user-id\"\n[tokens]\nissuer = \"wicket\"\nsigning-kid = \"hs-1\"\n[[tokens.keys]]\nkid = \"hs-1\"\nalg = \"HS256\"\n\
         secret = \"{HS_SECRET}\"\n\
         [[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy/ev-1\"\nprotected = [\"/buy/ev-1\"]\n\
         release = {{ mode = \"fixed\", rate = 0.0 }}\ninvite = {{ share = 0.25 }}\n\
         [[rooms]]\nid = \"r2\"\nevent = \"ev-2\"\ntarget = \"/buy/ev-2\"\nprotected = [\"/buy/ev-2\"]\n"
    ));
    let r = edge.admin("POST", "/admin/rooms/r1/invites/users", r#"{"users": ["inv-1", "inv-2", "inv-3"]}"#).await;
    assert_eq!(r.status, 200, "{}", r.text());
    for user in ["inv-1", "other-1", "inv-2", "other-2", "inv-3", "other-3"] {
        let r = request("GET", &edge.url("/queue/r1"), &[("x-user-id", user), ("accept", "application/json")], b"").await;
        assert_eq!((r.status, r.json()["state"].as_str()), (200, Some("waiting")), "{user}: {}", r.text());
    }
    let lane = edge.admin("GET", "/admin/rooms/r1/stats", "").await.json()["lane"].clone();
    assert_eq!(lane, serde_json::json!({"share": 0.25, "issued": 3, "serving": 0, "passed": 0}));
    assert!(edge.admin("GET", "/admin/rooms/r2/stats", "").await.json()["lane"].is_null());

    let mut page = Cdp::launch("en-US").await;
    page.navigate(&edge.admin_url("/")).await;
    page.until("!document.getElementById('signin').hidden", 5.0, "the sign-in form").await;
    page.eval(&format!("document.getElementById('token').value = {ADMIN_TOKEN:?}; document.getElementById('signin').requestSubmit(); true")).await;
    let figure = |room: &str| format!("document.querySelector('[data-room=\"{room}\"] [data-figure=\"lane\"]')?.textContent");
    let said = page.until(&figure("r1"), 6.0, "the lane figure").await;
    assert_eq!(said, "25 % · 3 · 0invite lane: share / joined / let in by it");
    let points = page.until("Number(document.querySelector('[data-room=\"r1\"] .lane-chart')?.dataset.points) >= 2 && document.querySelector('[data-room=\"r1\"] .lane-chart canvas') !== null", 5.0, "the lane chart's points").await;
    assert_eq!(points, true);
    assert_eq!(page.eval(&format!("{} ?? null", figure("r2"))).await, serde_json::Value::Null, "r2 has no lane");
    // A release of 4/s: a quarter of it goes to the lane, whose three fans are let in first.
    let r = edge.admin("PUT", "/admin/rooms/r1/release", r#"{"mode": "fixed", "rate": 4}"#).await;
    assert_eq!(r.status, 200, "{}", r.text());
    // (Everyone is let in within a few ticks; the lane's fans partly by the lane, the rest as
    // `serving` reaches them.)
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let lane = loop {
        let s = edge.admin("GET", "/admin/rooms/r1/stats", "").await.json();
        if s["serving"] == 6 {
            break s["lane"].clone();
        }
        assert!(std::time::Instant::now() < deadline, "{s}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let let_in = lane["serving"].as_u64().unwrap();
    assert!((1..=3).contains(&let_in), "the lane let in its share first: {lane}");
    page.until(&format!("{} === '25 % · 3 · {let_in}invite lane: share / joined / let in by it'", figure("r1")), 5.0, "the lane let in").await;
    page.screenshot("console-lane.png").await;
    page.eval("localStorage.setItem('wicket-console-lang', 'zh-CN'); location.reload(); true").await;
    // (Until the figure speaks Chinese: right after the reload is asked, the old page still answers.)
    let zh = format!("25 % · 3 · {let_in}邀请通道：份额 / 加入 / 经通道放行");
    let said = page.until(&format!("{} === {zh:?}", figure("r1")), 8.0, "the lane figure in zh-CN").await;
    assert_eq!(said, true);
    page.screenshot("console-lane-zh-CN.png").await;
}

/// A room made only through the admin API works in a real browser (issue #38): an edge started
/// without `[[rooms]]`, a room `PUT` on the admin port; a fan opening its queue page gets the page
/// styled (queue.css loaded: its rules in the document's style sheets, the card drawn by them;
/// the origin's answer for it left the page unstyled before e2c34aa), and once the room releases
/// (50/s, set through the admin API too) queue.js takes it to the target by itself (with script
/// on, only the script moves the page: the no-JS refresh is in `<noscript>`), with no exception
/// and no failed load on the way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_a_room_made_through_the_admin_api_is_styled_runs_its_script_and_admits() {
    let origin = TestUpstream::start("origin").await;
    let edge = TestEdge::start(&format!("origin = \"{}\"\n{}", origin.url(), hs_tokens()));
    let body = serde_json::json!({"event": "ev-1", "target": "/buy/ev-1", "protected": ["/buy/ev-1"], "release": {"mode": "fixed", "rate": 0.0}});
    let r = edge.admin("PUT", "/admin/rooms/r9", &body.to_string()).await;
    assert_eq!(r.status, 201, "{}", r.text());
    // Someone ahead, so the page waits (and can be looked at) until the room releases.
    get(&edge.url("/queue/r9"), &[("accept", "application/json"), ("user-agent", "first")]).await;
    let mut page = Cdp::launch("en-US").await;
    page.call("Log.enable", serde_json::json!({})).await;
    page.navigate(&edge.url("/queue/r9")).await;
    page.until("document.getElementById('queue').dataset.state === 'waiting' && document.getElementById('ahead').textContent.length > 0", 10.0, "a live status")
        .await;
    let styled = page
        .eval(
            "JSON.stringify([[...document.styleSheets].some(s => (s.href || '').endsWith('/static/queue.css') && [...s.cssRules].some(r => r.selectorText === '.card')), \
             getComputedStyle(document.querySelector('.card')).borderTopLeftRadius, getComputedStyle(document.body).display])",
        )
        .await;
    let styled: Vec<serde_json::Value> = serde_json::from_str(styled.as_str().unwrap()).unwrap();
    assert_eq!(styled, [serde_json::json!(true), "14px".into(), "flex".into()], "queue.css applied");
    page.screenshot("queue-admin-api-room.png").await;
    let r = edge.admin("PUT", "/admin/rooms/r9/release", r#"{"mode":"fixed","rate":50}"#).await;
    assert_eq!(r.status, 200, "{}", r.text());
    page.until("location.pathname === '/buy/ev-1'", 10.0, "the target").await;
    assert!(origin.seen.lock().iter().any(|s| s.ends_with("/buy/ev-1")), "the target reached the origin: {:?}", origin.seen.lock());
    let errors: Vec<&serde_json::Value> = page
        .events
        .iter()
        .filter(|e| e["method"] == "Runtime.exceptionThrown" || (e["method"] == "Log.entryAdded" && e["params"]["entry"]["level"] == "error"))
        .collect();
    assert!(errors.is_empty(), "no script error, no failed load: {errors:?}");
}

/// The queue page follows the room's event stream for as long as the fan waits: the edge ends
/// each stream after `event-stream-seconds` (2 s here: each ends after about a second, the stream's
/// last look) and the browser opens the next one itself; the page stays live, it does not fall
/// back to polling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_queue_page_stays_on_the_event_stream_across_its_ends() {
    let origin = TestUpstream::start("origin").await;
    let edge = TestEdge::start(&format!(
        "event-stream-seconds = 2\norigin = \"{}\"\n[tokens]\nissuer = \"wicket\"\nsigning-kid = \"hs-1\"\n[[tokens.keys]]\nkid = \"hs-1\"\n\
         alg = \"HS256\"\nsecret = \"{HS_SECRET}\"\n[[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy/ev-1\"\n\
         protected = [\"/buy/ev-1\"]\nrelease = {{ mode = \"fixed\", rate = 0.0 }}\n",
        origin.url()
    ));
    // The browser waits about 3 s before it reopens a stream: ends at about 1, 5, 9 and 13 s.
    let doms = chromium_doms(&edge.url("/queue/r1?lang=en"), "en-US", true, &[1500, 14500]).await;
    let conn = |dom: &str| {
        let at = dom.find("id=\"conn\"").unwrap_or_else(|| panic!("{dom}"));
        let end = dom[at..].find("</p>").unwrap() + at;
        dom[at..end].rsplit('>').next().unwrap().to_owned()
    };
    assert_eq!(conn(&doms[0]), "live", "{}", doms[0]);
    assert_eq!(conn(&doms[1]), "live", "after four or more ends of the stream: {}", doms[1]);
    // The edge served the page and one stream after another (6 here: the page and five streams).
    let m = edge.admin("GET", "/metrics", "").await.text();
    let served = m.lines().find_map(|l| l.strip_prefix("wicket_edge_requests_total{outcome=\"ok\",route=\"edge\"} ")).and_then(|v| v.parse::<u64>().ok());
    assert!(served.is_some_and(|n| n >= 4), "{served:?}: the browser did not reopen the stream");
}
