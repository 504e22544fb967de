//! The edge end to end: a real edge on free ports in front of real upstream servers.

mod common;

use std::io::Read;
use std::sync::atomic::Ordering;

use common::*;
use sha2::{Digest, Sha256};

fn cookie_header(cookies: &[(&str, &str)]) -> String {
    cookies.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("; ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_files_have_etags_encodings_304_and_head_and_never_reach_the_origin() {
    let origin = TestUpstream::start("origin").await;
    let edge = TestEdge::start(&format!(
        "origin = \"{}\"\n[[edge.cache-control]]\npath = \"/img/\"\nvalue = \"public, max-age=86400, immutable\"",
        origin.url()
    ));
    let page = detail_page();

    let r = get(&edge.url("/"), &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    assert_eq!(r.header("content-length"), Some(page.len().to_string().as_str()));
    assert_eq!(r.header("cache-control"), Some("public, max-age=5"));
    assert_eq!(r.header("vary"), Some("accept-encoding"));
    assert!(r.header("date").is_some(), "the page's countdown reads the server time from Date");
    assert_eq!(r.text(), page);
    let etag = r.header("etag").unwrap().to_owned();
    assert!(etag.starts_with('"'), "strong etag: {etag}");

    let r = get(&edge.url("/"), &[("if-none-match", &etag)]).await;
    assert_eq!(r.status, 304);
    assert!(r.body.is_empty());
    assert_eq!(r.header("etag"), Some(etag.as_str()));
    let r = get(&edge.url("/"), &[("if-none-match", "\"other\"")]).await;
    assert_eq!(r.status, 200);

    let r = get(&edge.url("/"), &[("accept-encoding", "gzip")]).await;
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(r.header("content-length"), Some(r.body.len().to_string().as_str()));
    assert!(r.body.len() < page.len());
    let mut plain = String::new();
    flate2::read::GzDecoder::new(&r.body[..]).read_to_string(&mut plain).unwrap();
    assert_eq!(plain, page);
    let gz_etag = r.header("etag").unwrap().to_owned();
    assert_ne!(gz_etag, etag);
    let r = get(&edge.url("/"), &[("accept-encoding", "gzip"), ("if-none-match", &gz_etag)]).await;
    assert_eq!(r.status, 304);

    let r = get(&edge.url("/index.html"), &[("accept-encoding", "gzip, deflate, br")]).await;
    assert_eq!(r.header("content-encoding"), Some("br"));
    let mut plain = Vec::new();
    brotli::BrotliDecompress(&mut &r.body[..], &mut plain).unwrap();
    assert_eq!(plain, page.as_bytes());
    let r = get(&edge.url("/"), &[("accept-encoding", "br;q=0, gzip;q=0")]).await;
    assert_eq!(r.header("content-encoding"), None);

    let r = request("HEAD", &edge.url("/"), &[], b"").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some(page.len().to_string().as_str()));
    assert!(r.body.is_empty());

    let r = get(&edge.url("/img/logo.png"), &[("accept-encoding", "gzip, br")]).await;
    assert_eq!(r.header("content-type"), Some("image/png"));
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(r.header("cache-control"), Some("public, max-age=86400, immutable"));
    let r = get(&edge.url("/app.js"), &[]).await;
    assert_eq!(r.header("content-type"), Some("text/javascript; charset=utf-8"));
    let r = get(&edge.url("/wicket/pow.js"), &[]).await;
    assert_eq!(r.status, 200);
    assert!(r.text().contains("leadingZeroBits"));

    assert_eq!(origin.hits.load(Ordering::SeqCst), 0, "static files never reach the origin");
    let r = get(&edge.url("/not-static"), &[]).await;
    assert_eq!(r.json()["upstream"], "origin");
    assert_eq!(origin.hits.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn core_prefix_goes_to_the_core_the_rest_to_the_origin_with_verified_identity_headers() {
    let origin = TestUpstream::start("origin").await;
    let core = TestUpstream::start("core").await;
    let edge = TestEdge::start(&format!(
        "origin = \"{}\"\ncore = \"{}\"\nuser-header = \"x-user-id\"",
        origin.url(),
        core.url()
    ));
    let r = get(&edge.url("/v1/events/ev-1"), &[("x-user-id", "alice"), ("wicket-room", "forged")]).await;
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["upstream"], "core");
    assert_eq!(v["headers"]["wicket-user"], "alice");
    assert!(v["headers"].get("wicket-room").is_none(), "incoming identity headers are stripped");
    assert!(v["headers"]["wicket-device"].as_str().unwrap().starts_with("fp-"));
    assert_eq!(v["headers"]["x-forwarded-for"], "127.0.0.1");
    assert!(r.cookies().contains_key("wicket_d"), "a device cookie is set when absent");

    let r = get(&edge.url("/shop?x=1"), &[("wicket-user", "forged")]).await;
    let v = r.json();
    assert_eq!(v["upstream"], "origin");
    assert!(v["headers"].get("wicket-user").is_none());
    let device = r.cookies()["wicket_d"].clone();
    let r = get(&edge.url("/shop"), &[("cookie", &format!("wicket_d={device}"))]).await;
    let v = r.json();
    assert_eq!(v["headers"]["wicket-device"].as_str().unwrap(), device.split('.').next().unwrap());
    assert!(!r.cookies().contains_key("wicket_d"), "a valid device cookie is kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_down_is_a_502_page_and_a_slow_origin_a_504() {
    let edge = TestEdge::start(&format!("origin = \"http://{}\"\nconnect-timeout-ms = 300", dead_addr()));
    let r = get(&edge.url("/anything"), &[]).await;
    assert_eq!(r.status, 502);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.json()["error"], "unavailable");
    let r = get(&edge.url("/anything"), &[("accept", "text/html,*/*")]).await;
    assert_eq!(r.status, 502);
    assert!(r.header("content-type").unwrap().starts_with("text/html"));
    assert_eq!(r.header("content-length"), Some(r.body.len().to_string().as_str()));
    assert!(r.text().contains("Temporarily unavailable"), "{}", r.text());
    // The page speaks the fan's language.
    let r = get(&edge.url("/anything"), &[("accept", "text/html"), ("accept-language", "zh-TW,zh;q=0.9")]).await;
    assert_eq!(r.status, 502);
    assert!(r.text().contains("<html lang=zh-TW>") && r.text().contains("服務暫時無法使用"), "{}", r.text());
    // Static pages still work with the origin down.
    assert_eq!(get(&edge.url("/"), &[]).await.status, 200);

    let slow = TestUpstream::start("origin").await;
    let edge = TestEdge::start(&format!("origin = \"{}\"\nread-timeout-ms = 300\nretries = 0", slow.url()));
    let r = get(&edge.url("/slow/3000"), &[]).await;
    assert_eq!(r.status, 504);
    assert_eq!(r.json()["error"], "unavailable");
    assert_eq!(get(&edge.url("/slow/10"), &[]).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ip_limit_refuses_over_burst_with_retry_after_in_json_or_html() {
    let origin = TestUpstream::start("origin").await;
    let edge = TestEdge::start(&format!(
        "origin = \"{}\"\n[[edge.limits]]\npath = \"/\"\nkey = \"ip\"\nrate = \"1r/m\"\nburst = 2\nnodelay = true\n\
         [edge.queue-page.text.ja]\nerr_busy_title = \"ただいま大変混雑しています\"\n",
        origin.url()
    ));
    for _ in 0..3 {
        assert_eq!(get(&edge.url("/"), &[]).await.status, 200);
    }
    let r = get(&edge.url("/"), &[]).await;
    assert_eq!(r.status, 429);
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=63).contains(&retry), "{retry}");
    assert_eq!(r.json()["error"], "rate_limited");
    let r = get(&edge.url("/other"), &[("accept", "text/html")]).await;
    assert_eq!(r.status, 429);
    assert!(r.header("retry-after").is_some());
    assert!(r.text().contains("<html lang=en>") && r.text().contains("Busy"), "{}", r.text());
    // The "Busy" page in the fan's language (it was English only), from the saved choice or
    // Accept-Language.
    let r = get(&edge.url("/other"), &[("accept", "text/html"), ("accept-language", "zh-CN,zh;q=0.9,en;q=0.8")]).await;
    assert_eq!(r.status, 429);
    assert!(r.text().contains("<html lang=zh-CN>") && r.text().contains("访问繁忙") && !r.text().contains("Busy"), "{}", r.text());
    let r = get(&edge.url("/other"), &[("accept", "text/html"), ("accept-language", "en"), ("cookie", "wicket_lang=ko")]).await;
    assert!(r.text().contains("<html lang=ko>") && r.text().contains("접속이 많습니다"), "{}", r.text());
    // An operator's text override reaches the edge's pages too.
    let r = get(&edge.url("/other"), &[("accept", "text/html"), ("accept-language", "ja-JP")]).await;
    assert!(r.text().contains("<title>ただいま大変混雑しています</title>"), "{}", r.text());
    // Queue polls have their own budget.
    let r = get(&edge.url("/queue/ev/status"), &[]).await;
    assert_eq!(r.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_limit_counts_each_user_separately() {
    let origin = TestUpstream::start("origin").await;
    let edge = TestEdge::start(&format!(
        "origin = \"{}\"\nuser-cookie = \"uid\"\n[[edge.limits]]\npath = \"/api/\"\nkey = \"user\"\nrate = \"1r/m\"",
        origin.url()
    ));
    assert_eq!(get(&edge.url("/api/x"), &[("cookie", "uid=alice")]).await.status, 200);
    let r = get(&edge.url("/api/x"), &[("cookie", "uid=alice")]).await;
    assert_eq!(r.status, 429);
    assert!(r.header("retry-after").unwrap().parse::<u64>().unwrap() >= 1);
    assert_eq!(get(&edge.url("/api/x"), &[("cookie", "uid=bob")]).await.status, 200);
    // Requests without a user are not counted by a user rule.
    assert_eq!(get(&edge.url("/api/x"), &[]).await.status, 200);
    assert_eq!(get(&edge.url("/api/x"), &[]).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn device_limit_uses_the_signed_cookie_and_falls_back_to_a_fingerprint() {
    let origin = TestUpstream::start("origin").await;
    let edge = TestEdge::start(&format!(
        "origin = \"{}\"\n[[edge.limits]]\npath = \"/api/\"\nkey = \"device\"\nrate = \"1r/m\"",
        origin.url()
    ));
    let first = get(&edge.url("/api/x"), &[("user-agent", "ua-1")]).await;
    assert_eq!(first.status, 200);
    let d1 = first.cookies()["wicket_d"].clone();
    let c1 = format!("wicket_d={d1}");
    assert_eq!(get(&edge.url("/api/x"), &[("cookie", &c1)]).await.status, 200);
    let r = get(&edge.url("/api/x"), &[("cookie", &c1)]).await;
    assert_eq!(r.status, 429);
    assert!(r.header("retry-after").is_some());
    // Without cookies the fingerprint (IP + headers) is the device: same headers, same device.
    let r = get(&edge.url("/api/x"), &[("user-agent", "ua-1")]).await;
    assert_eq!(r.status, 429);
    assert_eq!(get(&edge.url("/api/x"), &[("user-agent", "ua-2")]).await.status, 200);
    // A forged cookie is not a device of its own: it falls back to the fingerprint.
    let forged = format!("wicket_d={}.{}", "A".repeat(22), "B".repeat(22));
    let r = get(&edge.url("/api/x"), &[("cookie", &forged), ("user-agent", "ua-2")]).await;
    assert_eq!(r.status, 429);
    assert!(r.cookies().contains_key("wicket_d"), "a fresh cookie replaces the forged one");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xff_from_an_untrusted_peer_is_ignored_and_from_a_trusted_one_honoured() {
    let origin = TestUpstream::start("origin").await;
    let limit = "[[edge.limits]]\npath = \"/\"\nkey = \"ip\"\nrate = \"1r/m\"";
    let untrusted = TestEdge::start(&format!("origin = \"{}\"\n{limit}", origin.url()));
    assert_eq!(get(&untrusted.url("/p"), &[("x-forwarded-for", "198.51.100.1")]).await.status, 200);
    let r = get(&untrusted.url("/p"), &[("x-forwarded-for", "198.51.100.2")]).await;
    assert_eq!(r.status, 429, "spoofed X-Forwarded-For from an untrusted peer must not dodge the limit");

    let trusted =
        TestEdge::start(&format!("origin = \"{}\"\ntrusted-proxies = [\"127.0.0.0/8\"]\n{limit}", origin.url()));
    let r = get(&trusted.url("/p"), &[("x-forwarded-for", "203.0.113.9, 198.51.100.1")]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["headers"]["x-forwarded-for"], "203.0.113.9, 198.51.100.1, 127.0.0.1");
    assert_eq!(get(&trusted.url("/p"), &[("x-forwarded-for", "198.51.100.2")]).await.status, 200);
    assert_eq!(get(&trusted.url("/p"), &[("x-forwarded-for", "198.51.100.1")]).await.status, 429);
}

/// A holder of a whole /48 (many /64s: tunnel brokers hand them out free) or of many IPv4
/// addresses in one /24 is bounded by a rule that counts by the wider prefix, beside the
/// per-client rule; the next /48 or /24 is someone else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_by_48_and_24_bounds_a_holder_of_many_addresses() {
    let origin = TestUpstream::start("origin").await;
    let edge = TestEdge::start(&format!(
        "origin = \"{}\"\ntrusted-proxies = [\"127.0.0.1\"]\n\
         [[edge.limits]]\npath = \"/\"\nkey = \"ip\"\nrate = \"1r/m\"\nburst = 1\nnodelay = true\n\
         [[edge.limits]]\npath = \"/\"\nkey = \"ip\"\nrate = \"1r/m\"\nburst = 4\nnodelay = true\nipv6-prefix = 48\nipv4-prefix = 24\n",
        origin.url()
    ));
    let from = |ip: &str| {
        let (url, ip) = (edge.url("/p"), ip.to_owned());
        async move { get(&url, &[("x-forwarded-for", &ip), ("accept", "application/json")]).await.status }
    };
    for (a, b, c, d, other) in [
        ("2001:db8:aa:1::1", "2001:db8:aa:2::1", "2001:db8:aa:3::1", "2001:db8:aa:ff00::1", "2001:db8:ab:1::1"),
        ("198.51.100.1", "198.51.100.2", "198.51.100.3", "::ffff:198.51.100.4", "198.51.101.1"),
    ] {
        // One client: its own rule's burst (2), then refused by it.
        assert_eq!([from(a).await, from(a).await, from(a).await], [200, 200, 429], "{a}");
        // Others of the same /48 (/24): 3 more fit the wide rule's burst (5), the next does not.
        assert_eq!([from(b).await, from(b).await, from(c).await], [200, 200, 200], "{b} {c}");
        assert_eq!(from(d).await, 429, "{d}: the /48 (/24) has spent its budget");
        assert_eq!(from(other).await, 200, "{other}: another network");
    }
    let r = get(&edge.url("/p"), &[("x-forwarded-for", "2001:db8:aa:77::1"), ("accept", "application/json")]).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.json()["error"], "rate_limited", "{}", r.text());
}

/// An IPv6 client is one /64: rotating the interface id neither escapes a per-address limit nor
/// the anomaly rule's block (which then holds the whole /64); the next /64 is another client, and
/// an IPv4 client written IPv4-mapped is the same client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ipv6_client_rotating_inside_its_64_is_one_client() {
    let origin = TestUpstream::start("origin").await;
    let edge = TestEdge::start(&format!(
        "origin = \"{}\"\ntrusted-proxies = [\"127.0.0.1\"]\n[[edge.limits]]\npath = \"/\"\nkey = \"ip\"\nrate = \"1r/m\"\nburst = 1\nnodelay = true\n\
         [edge.anomaly]\nclient-max-rejects = 5\nblock-seconds = 60",
        origin.url()
    ));
    let from = |ip: String| {
        let url = edge.url("/p");
        async move { get(&url, &[("x-forwarded-for", &ip), ("accept", "application/json")]).await.status }
    };
    // The burst (2) is spent by two addresses of one /64; a third address of it is refused.
    assert_eq!(from("2001:db8:aa:1::1".into()).await, 200);
    assert_eq!(from("2001:db8:aa:1::2".into()).await, 200);
    assert_eq!(from("2001:db8:aa:1:1234:5678:9abc:def0".into()).await, 429);
    assert_eq!(from("2001:db8:aa:2::1".into()).await, 200, "the next /64 is someone else");
    // Rotating on: past 5 refusals the /64 is blocked (403), any address in it.
    let mut statuses = Vec::new();
    for i in 0..8 {
        statuses.push(from(format!("2001:db8:aa:1::{:x}", 0x100 + i)).await);
    }
    assert!(statuses.iter().all(|s| *s == 429 || *s == 403) && statuses.contains(&403), "{statuses:?}");
    assert_eq!(from("2001:db8:aa:1:ffff::9".into()).await, 403, "blocked as a /64");
    let blocks = edge.admin("GET", "/admin/blocklist", "").await.json();
    assert_eq!(blocks["temporary"]["ips"][0]["ip"], "2001:db8:aa:1::/64", "{blocks}");
    // IPv4, and the same address IPv4-mapped: one client.
    assert_eq!(from("198.51.100.4".into()).await, 200);
    assert_eq!(from("::ffff:198.51.100.4".into()).await, 200);
    assert_eq!(from("198.51.100.4".into()).await, 429);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_distinct_clients_behind_a_trusted_proxy_are_never_refused() {
    let edge = TestEdge::start(
        "trusted-proxies = [\"127.0.0.1\"]\n[[edge.limits]]\npath = \"/\"\nkey = \"ip\"\nrate = \"1r/m\"\nburst = 1\nnodelay = true",
    );
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    for i in 0..3000u32 {
        let ip = std::net::Ipv4Addr::from(0x0a00_0000 + i).to_string();
        for _ in 0..2 {
            let req = http::Request::get(edge.url("/"))
                .header("x-forwarded-for", &ip)
                .body(http_body_util::Full::new(bytes::Bytes::new()))
                .unwrap();
            let resp = client.request(req).await.unwrap();
            assert_eq!(resp.status(), 200, "client {ip} refused");
            http_body_util::BodyExt::collect(resp.into_body()).await.unwrap();
        }
    }
}

fn solve(challenge: &str, difficulty: u64) -> String {
    (0u64..)
        .map(|n| n.to_string())
        .find(|n| {
            let h = Sha256::digest(format!("{challenge}{n}").as_bytes());
            wicket_edge::bot::leading_zero_bits(&h) as u64 >= difficulty
        })
        .unwrap()
}

fn unsolve(challenge: &str, difficulty: u64) -> String {
    (0u64..)
        .map(|n| n.to_string())
        .find(|n| {
            let h = Sha256::digest(format!("{challenge}{n}").as_bytes());
            (wicket_edge::bot::leading_zero_bits(&h) as u64) < difficulty
        })
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proof_of_work_accepts_rejects_and_refuses_reuse() {
    let origin = TestUpstream::start("origin").await;
    let edge = TestEdge::start(&format!(
        "origin = \"{}\"\n[edge.bot.pow]\ndifficulty = 8\n[[edge.bot.routes]]\npath = \"/api/\"\ncheck = \"always\"",
        origin.url()
    ));
    let r = get(&edge.url("/api/buy"), &[]).await;
    assert_eq!(r.status, 403);
    assert_eq!(r.json()["challenge"], "/wicket/challenge");
    let r = get(&edge.url("/api/buy"), &[("accept", "text/html")]).await;
    assert_eq!(r.status, 403);
    assert!(r.text().contains("/wicket/pow.js"));
    assert_eq!(get(&edge.url("/elsewhere"), &[]).await.status, 200, "routes without a check pass");

    let c = get(&edge.url("/wicket/challenge"), &[]).await.json();
    let (challenge, difficulty) = (c["challenge"].as_str().unwrap().to_owned(), c["difficulty"].as_u64().unwrap());
    assert_eq!(difficulty, 8);
    let verify = |nonce: String| {
        let body = serde_json::json!({"pow": {"challenge": challenge, "nonce": nonce}}).to_string();
        let url = edge.url("/wicket/verify");
        async move { request("POST", &url, &[("content-type", "application/json")], body.as_bytes()).await }
    };
    let r = verify(unsolve(&challenge, difficulty)).await;
    assert_eq!(r.status, 403);
    assert!(r.json()["message"].as_str().unwrap().contains("wrong solution"));
    let nonce = solve(&challenge, difficulty);
    let r = verify(nonce.clone()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let cookies = r.cookies();
    let pass = cookie_header(&[("wicket_b", &cookies["wicket_b"]), ("wicket_d", &cookies["wicket_d"])]);
    let r = verify(nonce).await;
    assert_eq!(r.status, 403);
    assert!(r.json()["message"].as_str().unwrap().contains("already used"));

    let r = get(&edge.url("/api/buy"), &[("cookie", &pass)]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["upstream"], "origin");
    // The pass is bound to its device.
    let other = cookie_header(&[("wicket_b", &cookies["wicket_b"])]);
    assert_eq!(get(&edge.url("/api/buy"), &[("cookie", &other)]).await.status, 403);

    // A proof can ride on the request itself.
    let c = get(&edge.url("/wicket/challenge"), &[]).await.json();
    let ch = c["challenge"].as_str().unwrap();
    let header = format!("{ch} {}", solve(ch, 8));
    let r = get(&edge.url("/api/buy"), &[("wicket-pow", &header)]).await;
    assert_eq!(r.status, 200);
    assert!(r.cookies().contains_key("wicket_b"));
    let r = get(&edge.url("/api/buy"), &[("wicket-pow", &header)]).await;
    assert_eq!(r.status, 403, "inline proofs cannot be reused either");

    // Garbage is a clear 4xx.
    let r = request("POST", &edge.url("/wicket/verify"), &[], b"{not json").await;
    assert_eq!(r.status, 400);
    let big = vec![b'x'; 100_000];
    let r = request("POST", &edge.url("/wicket/verify"), &[], &big).await;
    assert_eq!(r.status, 413);
    let r = verify_raw(&edge, "{\"pow\":{\"challenge\":\"AAAA.BBBB\",\"nonce\":\"1\"}}").await;
    assert_eq!(r.status, 403);

    // Difficulty changes at run time.
    let r = edge.admin("PUT", "/admin/bot-policy", "{\"pow_difficulty\": 12}").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(get(&edge.url("/wicket/challenge"), &[]).await.json()["difficulty"], 12);
}

/// Proof-of-work per address through the /wicket door (the room's join is in tests/room.rs): an
/// address that gave `address-free` proofs gets harder challenges, written any way (IPv4-mapped,
/// another interface of the same IPv6 /64); a quiet address's challenge does not serve it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proof_of_work_costs_a_busy_address_more() {
    let edge = TestEdge::start(
        "trusted-proxies = [\"127.0.0.1\"]\n[edge.bot.pow]\ndifficulty = 4\naddress-free = 2\naddress-max-extra-bits = 3",
    );
    let challenge = |ip: &'static str| {
        let url = edge.url("/wicket/challenge");
        async move { get(&url, &[("x-forwarded-for", ip)]).await.json() }
    };
    let give = |ip: &'static str, c: serde_json::Value| {
        let url = edge.url("/wicket/verify");
        let ch = c["challenge"].as_str().unwrap().to_owned();
        let body = serde_json::json!({"pow": {"challenge": ch, "nonce": solve(&ch, c["difficulty"].as_u64().unwrap())}}).to_string();
        async move { request("POST", &url, &[("content-type", "application/json"), ("x-forwarded-for", ip)], body.as_bytes()).await }
    };
    let mut paid = Vec::new();
    for ip in ["2001:db8:7::1", "2001:db8:7::2", "2001:db8:7:0:abcd::3", "2001:db8:7::4", "2001:db8:7::5"] {
        let c = challenge(ip).await;
        paid.push(c["difficulty"].as_u64().unwrap());
        assert_eq!(give(ip, c).await.status, 200);
    }
    assert_eq!(paid, [4, 4, 5, 5, 6], "one /64 is one address");
    assert_eq!(challenge("2001:db8:8::1").await["difficulty"], 4, "the next /64 is not");
    for _ in 0..2 {
        let c = challenge("192.0.2.77").await;
        assert_eq!(give("192.0.2.77", c).await.status, 200);
    }
    assert_eq!(challenge("::ffff:192.0.2.77").await["difficulty"], 5, "IPv4-mapped is the same address");
    let quiet = challenge("192.0.2.78").await;
    assert_eq!(quiet["difficulty"], 4);
    let r = give("192.0.2.77", quiet.clone()).await;
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(r.json()["message"].as_str().unwrap().contains("too easy"), "{}", r.text());
    assert_eq!(give("192.0.2.78", quiet).await.status, 200, "refused, not spent");
    // From an untrusted peer X-Forwarded-For is not believed: the peer's address is counted.
    let other = TestEdge::start("[edge.bot.pow]\ndifficulty = 4\naddress-free = 1\naddress-max-extra-bits = 3");
    let c = get(&other.url("/wicket/challenge"), &[("x-forwarded-for", "198.51.100.1")]).await.json();
    let ch = c["challenge"].as_str().unwrap().to_owned();
    let body = serde_json::json!({"pow": {"challenge": ch, "nonce": solve(&ch, 4)}}).to_string();
    assert_eq!(request("POST", &other.url("/wicket/verify"), &[("content-type", "application/json")], body.as_bytes()).await.status, 200);
    let c = get(&other.url("/wicket/challenge"), &[("x-forwarded-for", "198.51.100.2")]).await.json();
    assert_eq!(c["difficulty"], 5, "a spoofed header does not make a new address");
}

async fn verify_raw(edge: &TestEdge, body: &str) -> Resp {
    request("POST", &edge.url("/wicket/verify"), &[("content-type", "application/json")], body.as_bytes()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn captcha_hook_yes_no_slow_garbage_down_in_both_degrade_modes() {
    let origin = TestUpstream::start("origin").await;
    let fake = FakeSiteverify::start("cap-secret").await;
    let cfg = |url: String| {
        format!(
            "origin = \"{}\"\n[edge.bot]\nproof = \"captcha\"\n[edge.bot.captcha]\nverify-url = \"{url}\"\n\
             secret = \"cap-secret\"\ntimeout-ms = 500\n[[edge.bot.routes]]\npath = \"/api/\"\ncheck = \"always\"",
            origin.url()
        )
    };
    let edge = TestEdge::start(&cfg(format!("http://{}/siteverify", fake.addr)));
    let ask = |resp: &'static str| {
        let edge = &edge;
        async move { verify_raw(edge, &format!("{{\"captcha\": \"{resp}\"}}")).await }
    };
    let r = ask("yes").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let cookies = r.cookies();
    let pass = cookie_header(&[("wicket_b", &cookies["wicket_b"]), ("wicket_d", &cookies["wicket_d"])]);
    assert_eq!(get(&edge.url("/api/x"), &[("cookie", &pass)]).await.status, 200);
    assert_eq!(ask("no").await.status, 403);
    // Fail closed (default): slow and garbage answers refuse with 503.
    let started = std::time::Instant::now();
    assert_eq!(ask("slow").await.status, 503);
    assert!(started.elapsed() < std::time::Duration::from_secs(2), "the timeout bounds the wait");
    assert_eq!(ask("garbage").await.status, 503);
    // The header path works too.
    assert_eq!(get(&edge.url("/api/x"), &[("wicket-captcha", "yes")]).await.status, 200);
    assert_eq!(get(&edge.url("/api/x"), &[("wicket-captcha", "no")]).await.status, 403);

    // Fail open, switched at run time: unavailable passes, "no" still fails.
    let r = edge.admin("PUT", "/admin/bot-policy", "{\"captcha_fail_open\": true}").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["captcha_fail_open"], true);
    assert_eq!(ask("slow").await.status, 200);
    assert_eq!(ask("garbage").await.status, 200);
    assert_eq!(ask("no").await.status, 403);
    assert!(fake.calls.load(Ordering::SeqCst) >= 8);

    // Provider down.
    let down = TestEdge::start(&cfg(format!("http://{}/siteverify", dead_addr())));
    let r = verify_raw(&down, "{\"captcha\": \"yes\"}").await;
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["error"], "unavailable");
    down.admin("PUT", "/admin/bot-policy", "{\"captcha_fail_open\": true}").await;
    assert_eq!(verify_raw(&down, "{\"captcha\": \"yes\"}").await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocklist_ips_users_devices_at_run_time() {
    let origin = TestUpstream::start("origin").await;
    let edge = TestEdge::start(&format!("origin = \"{}\"\nuser-header = \"x-user-id\"", origin.url()));
    assert_eq!(get(&edge.url("/"), &[]).await.status, 200);
    let r = edge.admin("POST", "/admin/blocklist", "{\"ips\": [\"127.0.0.0/8\"]}").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["ips"][0], "127.0.0.0/8");
    let r = get(&edge.url("/"), &[]).await;
    assert_eq!(r.status, 403);
    assert_eq!(r.json()["error"], "forbidden");
    let r = edge.admin("DELETE", "/admin/blocklist", "{\"ips\": [\"127.0.0.0/8\"]}").await;
    assert_eq!(r.status, 200);
    assert_eq!(get(&edge.url("/"), &[]).await.status, 200);

    edge.admin("POST", "/admin/blocklist", "{\"users\": [\"mallory\"]}").await;
    assert_eq!(get(&edge.url("/shop"), &[("x-user-id", "mallory")]).await.status, 403);
    assert_eq!(get(&edge.url("/shop"), &[("x-user-id", "alice")]).await.status, 200);

    let d = get(&edge.url("/shop"), &[]).await.cookies()["wicket_d"].clone();
    let id = d.split('.').next().unwrap().to_owned();
    edge.admin("POST", "/admin/blocklist", &format!("{{\"devices\": [\"{id}\"]}}")).await;
    assert_eq!(get(&edge.url("/shop"), &[("cookie", &format!("wicket_d={d}"))]).await.status, 403);

    let r = edge.admin("POST", "/admin/blocklist", "{\"ips\": [\"not-an-ip\"], \"users\": [\"eve\"]}").await;
    assert_eq!(r.status, 400);
    assert_eq!(get(&edge.url("/shop"), &[("x-user-id", "eve")]).await.status, 200, "invalid input adds nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anomaly_rules_block_and_are_counted() {
    let origin = TestUpstream::start("origin").await;
    let edge = TestEdge::start(&format!(
        "origin = \"{}\"\nuser-header = \"x-user-id\"\n[edge.anomaly]\ndevice-max-users = 2\nclient-max-rejects = 3\n\
         [[edge.limits]]\npath = \"/limited/\"\nkey = \"ip\"\nrate = \"1r/m\"",
        origin.url()
    ));
    let d = get(&edge.url("/shop"), &[]).await.cookies()["wicket_d"].clone();
    let c = format!("wicket_d={d}");
    assert_eq!(get(&edge.url("/shop"), &[("cookie", &c), ("x-user-id", "u1")]).await.status, 200);
    assert_eq!(get(&edge.url("/shop"), &[("cookie", &c), ("x-user-id", "u2")]).await.status, 200);
    assert_eq!(get(&edge.url("/shop"), &[("cookie", &c), ("x-user-id", "u3")]).await.status, 403);
    assert_eq!(get(&edge.url("/shop"), &[("cookie", &c), ("x-user-id", "u1")]).await.status, 403, "device blocked");
    let bl = edge.admin("GET", "/admin/blocklist", "").await.json();
    assert_eq!(bl["temporary"]["devices"][0]["device"], d.split('.').next().unwrap());

    assert_eq!(get(&edge.url("/limited/a"), &[]).await.status, 200);
    for _ in 0..3 {
        assert_eq!(get(&edge.url("/limited/a"), &[]).await.status, 429);
    }
    // The fourth reject trips the rule: the client is blocked everywhere for a while.
    assert_eq!(get(&edge.url("/limited/a"), &[]).await.status, 429);
    assert_eq!(get(&edge.url("/"), &[]).await.status, 403);

    let m = String::from_utf8_lossy(&edge.admin("GET", "/metrics", "").await.body).into_owned();
    assert!(m.contains("wicket_edge_anomalies_total{rule=\"device_users\"} 1"), "{m}");
    assert!(m.contains("wicket_edge_anomalies_total{rule=\"client_rejects\"} 1"), "{m}");
    assert!(m.contains("wicket_edge_rejects_total{reason=\"rate_limited\"} 4"), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_without_or_with_a_wrong_token_is_401_and_changes_nothing() {
    let edge = TestEdge::start("");
    let body = b"{\"ips\": [\"127.0.0.1\"]}";
    for auth in [None, Some("Bearer wrong"), Some("Bearer "), Some(ADMIN_TOKEN)] {
        let headers: Vec<(&str, &str)> = auth.map(|a| ("authorization", a)).into_iter().collect();
        let r = request("POST", &edge.admin_url("/admin/blocklist"), &headers, body).await;
        assert_eq!(r.status, 401, "{auth:?}");
        assert_eq!(r.json()["error"], "unauthorized");
        let r = request("PUT", &edge.admin_url("/admin/bot-policy"), &headers, b"{\"pow_difficulty\": 30}").await;
        assert_eq!(r.status, 401);
        assert_eq!(request("GET", &edge.admin_url("/metrics"), &headers, b"").await.status, 401);
    }
    assert_eq!(get(&edge.url("/"), &[]).await.status, 200, "the blocklist is unchanged");
    let p = edge.admin("GET", "/admin/bot-policy", "").await.json();
    assert_eq!(p["pow_difficulty"], 16, "the bot policy is unchanged");

    assert_eq!(get(&edge.admin_url("/healthz"), &[]).await.status, 200);
    let h = edge.admin("GET", "/admin/health", "").await;
    assert_eq!(h.status, 200);
    assert_eq!(h.json()["static_files"], 7, "the site's, pow.js and the queue page's two");
    let cfg = edge.admin("GET", "/admin/config", "").await.text();
    assert!(!cfg.contains(ADMIN_TOKEN) && !cfg.contains(SECRET), "secrets are redacted: {cfg}");
    assert!(cfg.contains("<redacted>"));
    assert_eq!(edge.admin("GET", "/admin/limits", "").await.json()["limits"], serde_json::json!([]));
    let m = edge.admin("GET", "/metrics", "").await;
    assert!(m.text().contains("wicket_edge_requests_total"));
    assert_eq!(edge.admin("GET", "/admin/nope", "").await.status, 404);
    assert_eq!(edge.admin("POST", "/admin/blocklist", "{\"bogus\": 1}").await.status, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protected_paths_need_an_admission_token() {
    let origin = TestUpstream::start("origin").await;
    let edge = TestEdge::start(&format!(
        "origin = \"{}\"\nuser-header = \"x-user-id\"\n[[edge.protected]]\npath = \"/buy/ev-42\"\nroom = \"ev-42\"\n\n\
         [tokens]\nissuer = \"wicket\"\n[[tokens.keys]]\nkid = \"hs-1\"\nalg = \"HS256\"\nsecret = \"{HS_SECRET}\"",
        origin.url()
    ));
    let r = get(&edge.url("/buy/ev-42"), &[("accept", "text/html")]).await;
    assert_eq!(r.status, 302);
    assert_eq!(r.header("location"), Some("/queue/ev-42"));
    let r = get(&edge.url("/buy/ev-42"), &[("accept", "application/json")]).await;
    assert_eq!(r.status, 403);
    assert_eq!(r.json()["error"], "forbidden");
    assert_eq!(r.json()["queue"], "/queue/ev-42");
    assert_eq!(origin.hits.load(Ordering::SeqCst), 0);

    let token = mint_token("ev-42", "ev-42", "alice", 120, "wicket", "hs-1", HS_SECRET);
    let bearer = format!("Bearer {token}");
    let alice = ("x-user-id", "alice");
    let r = get(&edge.url("/buy/ev-42"), &[("authorization", &bearer), alice, ("wicket-user", "mallory")]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["headers"]["wicket-user"], "alice");
    assert_eq!(v["headers"]["wicket-room"], "ev-42");
    assert_eq!(v["headers"]["wicket-position"], "42");
    let cookie = format!("wicket_a_ev-42={token}");
    assert_eq!(get(&edge.url("/buy/ev-42/seats"), &[("cookie", &cookie), alice]).await.status, 200);
    // The token passes only for the visitor it names, though this rule has no waiting room behind it.
    assert_eq!(get(&edge.url("/buy/ev-42/seats"), &[("cookie", &cookie), ("x-user-id", "bob")]).await.status, 403);
    assert_eq!(get(&edge.url("/buy/ev-42/seats"), &[("cookie", &cookie)]).await.status, 403);

    let r = get(&edge.url("/buy/ev-42/revoke"), &[("cookie", &cookie), alice]).await;
    assert_eq!(r.status, 200);
    assert!(r.header("wicket-revoke").is_none());
    assert_eq!(r.cookies().get("wicket_a_ev-42").map(String::as_str), Some(""));

    for bad in [
        mint_token("ev-43", "ev-42", "alice", 120, "wicket", "hs-1", HS_SECRET),
        mint_token("ev-42", "ev-43", "alice", 120, "wicket", "hs-1", HS_SECRET),
        mint_token("ev-42", "ev-42", "alice", -60, "wicket", "hs-1", HS_SECRET),
        mint_token("ev-42", "ev-42", "alice", 3600, "wicket", "hs-1", HS_SECRET),
        mint_token("ev-42", "ev-42", "alice", 120, "other", "hs-1", HS_SECRET),
        mint_token("ev-42", "ev-42", "alice", 120, "wicket", "hs-2", HS_SECRET),
        mint_token("ev-42", "ev-42", "alice", 120, "wicket", "hs-1", "a-different-secret-0123456789abcdef"),
        "garbage".to_owned(),
    ] {
        let r = get(&edge.url("/buy/ev-42"), &[("authorization", &format!("Bearer {bad}")), alice]).await;
        assert_eq!(r.status, 403, "{bad}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspicious_mode_checks_only_suspicious_clients() {
    let origin = TestUpstream::start("origin").await;
    let edge = TestEdge::start(&format!(
        "origin = \"{}\"\n[edge.bot.pow]\ndifficulty = 4\n[[edge.bot.routes]]\npath = \"/\"\ncheck = \"suspicious\"",
        origin.url()
    ));
    // No device cookie, no browser headers: suspicious.
    let r = get(&edge.url("/shop"), &[]).await;
    assert_eq!(r.status, 403);
    let device = r.cookies()["wicket_d"].clone();
    let browser = [("user-agent", "Mozilla/5.0"), ("accept-language", "en")];
    let c = format!("wicket_d={device}");
    let r = get(&edge.url("/shop"), &[browser[0], browser[1], ("cookie", &c)]).await;
    assert_eq!(r.status, 200, "a browser with a valid device cookie is not checked");
    let r = get(&edge.url("/shop"), &[browser[0], ("cookie", &c)]).await;
    assert_eq!(r.status, 403, "no Accept-Language is suspicious");
    // Static pages are never bot-checked.
    assert_eq!(get(&edge.url("/"), &[]).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_static_fast_path_and_the_full_proxy_answer_alike() {
    let edge = TestEdge::start("");
    for (accept, inm) in [("", false), ("gzip", false), ("br", false), ("gzip", true)] {
        let fast = get(&edge.url("/"), &[("accept-encoding", accept)]).await;
        let etag = fast.header("etag").unwrap().to_owned();
        let mut h = vec![("accept-encoding", accept)];
        if inm {
            h.push(("if-none-match", etag.as_str()));
        }
        let fast = get(&edge.url("/"), &h).await;
        // `Upgrade` sends the request through the full proxy.
        h.push(("upgrade", "nothing"));
        let slow = get(&edge.url("/"), &h).await;
        assert_eq!(fast.status, slow.status);
        for name in ["etag", "content-type", "content-length", "cache-control", "vary", "content-encoding"] {
            assert_eq!(fast.header(name), slow.header(name), "{name} ({accept}, {inm})");
        }
        assert!(fast.header("date").is_some() && slow.header("date").is_some());
        assert_eq!(fast.body, slow.body);
    }
    let r = request("HEAD", &edge.url("/app.js?v=1"), &[], b"").await;
    assert_eq!(r.status, 200);
    assert!(r.body.is_empty());
    assert!(r.header("content-length").unwrap().parse::<usize>().unwrap() > 0);
    let m = String::from_utf8_lossy(&edge.admin("GET", "/metrics", "").await.body).into_owned();
    assert!(m.contains("wicket_edge_requests_total{outcome=\"ok\",route=\"static\"}"), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_clear_answer_and_the_edge_keeps_serving() {
    let origin = TestUpstream::start("origin").await;
    let edge = TestEdge::start(&format!("origin = \"{}\"\nuser-cookie = \"uid\"", origin.url()));
    // Malformed cookies: no device, no user, but an answer and a fresh device cookie.
    let long_uid = format!("uid={}", "u".repeat(500));
    for c in ["wicket_d", "wicket_d=", "=;;;=", "wicket_d=a.b.c", long_uid.as_str(), "wicket_d=\"unterminated"] {
        let r = get(&edge.url("/shop"), &[("cookie", c)]).await;
        assert_eq!(r.status, 200, "{c}");
        assert!(r.cookies().contains_key("wicket_d"), "{c}");
    }
    // An oversized request head is refused (or the connection closed), never a crash.
    let big = "x".repeat(200 * 1024);
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let req = http::Request::get(edge.url("/")).header("x-big", &big).body(Default::default()).unwrap();
    // A closed connection is acceptable too.
    if let Ok(resp) = client.request(req).await {
        assert_eq!(resp.status(), 431);
    }
    // A raw garbage request line.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(edge.addr).await.unwrap();
    s.write_all(b"\x00\x01GARBAGE\r\n\r\n").await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), s.read_to_end(&mut out)).await;
    assert!(out.is_empty() || out.starts_with(b"HTTP/1.1 400"), "{:?}", String::from_utf8_lossy(&out));
    // Still serving.
    assert_eq!(get(&edge.url("/"), &[]).await.status, 200);
    assert_eq!(get(&edge.url("/shop"), &[]).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_limiter_keys_are_pruned_by_the_background_task() {
    let edge = TestEdge::start(
        "trusted-proxies = [\"127.0.0.1\"]\nprune-seconds = 1\n[[edge.limits]]\npath = \"/\"\nkey = \"ip\"\nrate = \"1r/s\"",
    );
    for i in 0..50u32 {
        let ip = std::net::Ipv4Addr::from(0xc633_6400 + i).to_string();
        assert_eq!(get(&edge.url("/"), &[("x-forwarded-for", &ip)]).await.status, 200);
    }
    let keys = |v: serde_json::Value| v["limits"][0]["live_keys"].as_u64().unwrap();
    // Keys return to "fresh" one second after their request, so at least the latest are live.
    let live = keys(edge.admin("GET", "/admin/limits", "").await.json());
    assert!((1..=50).contains(&live), "{live}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if keys(edge.admin("GET", "/admin/limits", "").await.json()) == 0 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "keys were never pruned");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let m = edge.admin("GET", "/metrics", "").await.text();
    assert!(m.contains("wicket_edge_limiter_keys{key=\"ip\",rule=\"0\"} 0"), "{m}");
}
