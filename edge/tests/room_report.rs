//! The post-sale report of a room (`GET /admin/rooms/<room>/report`), end to end against real
//! edges: joins, admissions, holds (a session's first use), places released, refusals by reason
//! and waits counted per minute into the room store, the same on every edge sharing a Redis room
//! and after a restart; JSON and CSV; every bad request refused with its exact answer.

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};
use wicket_testkit::RedisServer;

/// `[edge]` keys and tables of a sale edge: room r1 guarding `/buy` on `origin`, letting people
/// in at once (fixed 1000/s), and a limit of one `POST /queue/r1/join` a minute per address.
fn sale(origin: &str) -> String {
    format!(
        "origin = \"{origin}\"\n[[edge.limits]]\npath = \"/queue/r1/join\"\nkey = \"ip\"\nrate = \"1r/m\"\nburst = 0\nnodelay = true\n\
         {}\n[[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy\"\nprotected = [\"/buy\"]\n\
         release = {{ mode = \"fixed\", rate = 1000.0 }}\n",
        hs_tokens()
    )
}

/// Waits until at least `left` seconds are left of the current minute (so what a test does next
/// falls in one minute); that minute's number (Unix s / 60).
async fn minute_with(left: u64) -> u64 {
    let now = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    if 60 - now().as_secs() % 60 < left {
        let wait = 60_000 - (now().as_millis() % 60_000) as u64 + 200;
        tokio::time::sleep(Duration::from_millis(wait)).await;
    }
    now().as_secs() / 60
}

fn rfc3339(minute: u64) -> String {
    time::OffsetDateTime::from_unix_timestamp(minute as i64 * 60)
        .unwrap()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap()
}

/// Polls a fan's status through `base` until admitted.
async fn admitted(fan: &mut Fan, base: &str) {
    let deadline = Instant::now() + Duration::from_secs(8);
    loop {
        let s = fan.status(base, "r1").await;
        if s["state"] == "admitted" {
            return;
        }
        assert!(Instant::now() < deadline, "not admitted: {s}");
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

/// A GET of `path` with the fan's cookies (no answer cookies kept).
async fn fan_get(fan: &Fan, base: &str, path: &str) -> Resp {
    let cookie = fan.jar.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("; ");
    get(&format!("{base}{path}"), &[("cookie", &cookie), ("accept", "application/json"), ("user-agent", "fan")]).await
}

/// Every refusal reason a report counts, at 0 but for `some`.
fn refusals(some: &[(&str, u64)]) -> Value {
    let mut v = json!({"rate_limited": 0, "blocked": 0, "bot_required": 0, "bot_failed": 0, "bot_unavailable": 0,
        "not_admitted": 0, "room_state_unavailable": 0, "other": 0, "room_closed": 0, "reject_all": 0, "sold_out": 0,
        "invite_only": 0, "invite_invalid": 0, "invite_taken": 0, "bad_request": 0, "no_ticket": 0});
    for (k, n) in some {
        assert!(v.get(k).is_some(), "no reason {k}");
        v[k] = json!(n);
    }
    v
}

/// The counts of one minute of a report (the leader's figures left out: they change every tick).
fn counts(row: &Value) -> Value {
    json!({
        "minute": row["minute"], "joins": row["joins"], "admissions": row["admissions"], "holds": row["holds"],
        "released": row["released"], "refusals": row["refusals"], "held_of_admitted": row["held_of_admitted"],
        "admitted_of_released": row["admitted_of_released"], "drop_offs": row["drop_offs"],
        "waits": row["wait_histogram"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).sum::<u64>(),
    })
}

fn row(report: &Value, minute: &str) -> Value {
    report["minutes"].as_array().unwrap().iter().find(|r| r["minute"] == minute).cloned().unwrap_or_else(|| panic!("no row {minute}: {report}"))
}

/// Reads the report of r1 on `edge` until `done` holds (the edges flush once a second).
async fn report_until(edge: &TestEdge, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(6);
    loop {
        let r = edge.admin("GET", "/admin/rooms/r1/report", "").await;
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        if done(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: {v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sale_on_two_edges_sharing_redis_is_reported_per_minute_on_both_and_after_a_restart() {
    let redis = RedisServer::start();
    let origin = TestUpstream::start("origin").await;
    let store = format!("store = \"{}\"", redis.url());
    let a = TestEdge::start_full(&store, &sale(&origin.url()), &[], &[]);
    let b = TestEdge::start_full(&store, &sale(&origin.url()), &[], &[]);
    let (base_a, base_b) = (format!("http://{}", a.addr), format!("http://{}", b.addr));
    let m = minute_with(40).await;
    // Four fans join, two through each edge, and are let in.
    let mut fans: Vec<Fan> = (0..4).map(|_| Fan::default()).collect();
    for (i, fan) in fans.iter_mut().enumerate() {
        let base = if i < 2 { &base_a } else { &base_b };
        assert_eq!(fan.join(base, "r1").await.status, 200);
        admitted(fan, base).await;
    }
    // Two of them buy: fan 0 three times through both edges (one hold), fan 2 once. Fans 1 and 3
    // never use their session.
    for (fan, base) in [(0, &base_a), (0, &base_a), (0, &base_b), (2, &base_b)] {
        let r = fan_get(&fans[fan], base, "/buy").await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    // A fifth visitor joins through the limited POST three times: one join, two refusals; it
    // never comes back for its turn (released, never admitted: abandoned).
    for expect in [200, 429, 429] {
        let r = request("POST", &format!("{base_a}/queue/r1/join"), &[("accept", "application/json"), ("user-agent", "flood")], b"{}").await;
        assert_eq!(r.status, expect, "{}", r.text());
    }
    // Two requests for the protected path without a token.
    for _ in 0..2 {
        let r = get(&format!("{base_b}/buy"), &[("accept", "application/json"), ("user-agent", "nobody")]).await;
        assert_eq!(r.status, 403, "{}", r.text());
    }
    let minute = rfc3339(m);
    let refusals = refusals(&[("rate_limited", 2), ("not_admitted", 2)]);
    // By cohort: of the minute's 4 admissions 2 were used; of its 5 places released, 4 came.
    let want = json!({"minute": minute, "joins": 5, "admissions": 4, "holds": 2, "released": 5, "refusals": refusals, "waits": 4,
        "held_of_admitted": 2, "admitted_of_released": 4, "drop_offs": {"unused": 2, "abandoned": 1}});
    let on_a = report_until(&a, "A reports the sale", |v| {
        v["minutes"].as_array().unwrap().iter().any(|r| r["minute"] == minute && counts(r) == want)
    })
    .await;
    assert!(minute_with(0).await == m, "the sale took more than its minute: the test cannot tell minutes apart");
    assert_eq!(on_a["room"], "r1");
    assert_eq!(on_a["event"], "ev-1");
    assert_eq!(on_a["store"], "redis");
    assert_eq!(on_a["from"], minute);
    let t = &on_a["totals"];
    assert_eq!(
        (&t["joins"], &t["admissions"], &t["holds"], &t["released"], &t["drop_offs"], &t["refusals"], &t["sold_out_at"]),
        (&json!(5), &json!(4), &json!(2), &json!(5), &json!({"unused": 2, "abandoned": 1}), &refusals, &Value::Null),
        "{t}"
    );
    // Everyone got in within two seconds of joining (a release tick): every wait is in the
    // first two buckets (≤ 1 s, ≤ 2 s).
    let h: Vec<u64> = t["wait_histogram"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    assert_eq!(h.len(), on_a["wait_bounds_seconds"].as_array().unwrap().len() + 1);
    assert_eq!(h[0] + h[1], 4, "{h:?}");
    assert!([json!(1), json!(2)].contains(&t["wait_seconds"]["p99"]), "{t}");
    // The leader's figures: the fixed rate it ran at, the room's P99 target, not sold out.
    let r = row(&on_a, &minute);
    assert_eq!((&r["rate_set"], &r["p99_target_ms"], &r["sold_out"]), (&json!(1000.0), &json!(100.0), &json!(false)), "{r}");
    // Edge B reads the same report (one store); so does an edge started after A stopped.
    let on_b = b.admin("GET", "/admin/rooms/r1/report", "").await.json();
    assert_eq!(counts(&row(&on_b, &minute)), want);
    assert_eq!(on_b["totals"]["drop_offs"], t["drop_offs"]);
    drop(a);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let c = TestEdge::start_full(&store, &sale(&origin.url()), &[], &[]);
    let on_c = c.admin("GET", "/admin/rooms/r1/report", "").await.json();
    assert_eq!(counts(&row(&on_c, &minute)), want, "{on_c}");
    assert_eq!((&on_c["totals"]["joins"], &on_c["totals"]["admissions"]), (&json!(5), &json!(4)));
    // A range: the sale's minute alone, or the minutes after it.
    let one = c.admin("GET", &format!("/admin/rooms/r1/report?from={minute}&to={minute}"), "").await.json();
    assert_eq!(one["minutes"].as_array().unwrap().iter().map(counts).collect::<Vec<_>>(), vec![want.clone()]);
    assert_eq!((&one["from"], &one["to"]), (&json!(minute), &json!(minute)));
    let after = c.admin("GET", &format!("/admin/rooms/r1/report?from={}", rfc3339(m + 1)), "").await.json();
    assert!(after["minutes"].as_array().unwrap().iter().all(|r| r["minute"] != minute), "{after}");
    // CSV: one row a minute, by `format=csv` or by `Accept: text/csv`.
    let csv = c.admin("GET", &format!("/admin/rooms/r1/report?format=csv&from={minute}&to={minute}"), "").await;
    assert_eq!(csv.status, 200);
    assert_eq!(csv.header("content-type"), Some("text/csv; charset=utf-8"));
    assert_eq!(csv.header("content-disposition"), Some("attachment; filename=\"r1-report.csv\""));
    let text = csv.text();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(
        lines[0],
        "minute,joins,admissions,holds,released,refused_rate_limited,refused_blocked,refused_bot_required,refused_bot_failed,\
         refused_bot_unavailable,refused_not_admitted,refused_room_state_unavailable,refused_other,wait_p50_s,wait_p90_s,wait_p99_s,\
         rate_set,rate_measured,p99_ms,p99_target_ms,sold_out,\
         unused,abandoned,held_of_admitted,admitted_of_released,refused_room_closed,refused_reject_all,refused_sold_out,\
         refused_invite_only,refused_invite_invalid,refused_invite_taken,refused_bad_request,refused_no_ticket",
        "the first release's columns first, in their places; those added since after them"
    );
    assert!(lines[1].ends_with(",2,1,2,4,0,0,0,0,0,0,0,0"), "{}", lines[1]);
    assert!(lines[1].starts_with(&format!("{minute},5,4,2,5,2,0,0,0,0,2,0,0,")), "{}", lines[1]);
    assert!(lines[1].contains(",1000,"), "{}", lines[1]);
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let by_accept =
        get(&c.admin_url(&format!("/admin/rooms/r1/report?from={minute}&to={minute}")), &[("authorization", &auth), ("accept", "text/csv")]).await;
    assert_eq!((by_accept.status, by_accept.text().lines().nth(1).map(|l| l.split(',').take(13).collect::<Vec<_>>())),
               (200, Some(lines[1].split(',').take(13).collect())));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_report_requests_get_exact_refusals() {
    let origin = TestUpstream::start("origin").await;
    let edge = TestEdge::start(&sale(&origin.url()));
    let cases: &[(&str, &str, u16, Value)] = &[
        ("GET", "/admin/rooms/nope/report", 404, json!({"error": "not_found", "message": "no room \"nope\""})),
        ("GET", "/admin/rooms/R1/report", 404, json!({"error": "not_found", "message": "no room \"R1\""})),
        ("GET", "/admin/rooms/r1/report/", 404, json!({"error": "not_found", "message": "no such room endpoint"})),
        ("POST", "/admin/rooms/r1/report", 405, json!({"error": "bad_request", "message": "GET only"})),
        ("DELETE", "/admin/rooms/r1/report", 405, json!({"error": "bad_request", "message": "GET only"})),
        ("GET", "/admin/rooms/r1/report?format=xml", 400, json!({"error": "bad_request", "message": "format must be json or csv, not \"xml\""})),
        ("GET", "/admin/rooms/r1/report?format=csv&format=json", 400, json!({"error": "bad_request", "message": "format is given twice"})),
        ("GET", "/admin/rooms/r1/report?form=csv", 400,
         json!({"error": "bad_request", "message": "unknown parameter \"form\": format, from and to are known"})),
        ("GET", "/admin/rooms/r1/report?from=yesterday", 400,
         json!({"error": "bad_request", "message": "from must be an RFC 3339 time (2026-12-01T20:00:00Z), not \"yesterday\""})),
        ("GET", "/admin/rooms/r1/report?to=2026-13-01T00:00:00Z", 400,
         json!({"error": "bad_request", "message": "to must be an RFC 3339 time (2026-12-01T20:00:00Z), not \"2026-13-01T00:00:00Z\""})),
        ("GET", "/admin/rooms/r1/report?from=2026-12-01T20%3", 400, json!({"error": "bad_request", "message": "from: a bad %-escape"})),
        ("GET", "/admin/rooms/r1/report?from=2026-12-01T21:00:00Z&to=2026-12-01T20:00:00Z", 400,
         json!({"error": "bad_request", "message": "from is after to"})),
        ("GET", "/admin/rooms/r1/report?from=2026-01-01T00:00:00Z&to=2026-12-01T00:00:00Z", 400,
         json!({"error": "bad_request", "message": "more than 10080 minutes in the range: narrow it with from and to"})),
    ];
    for (method, path, status, body) in cases {
        let r = edge.admin(method, path, "").await;
        assert_eq!((r.status, r.json()), (*status, body.clone()), "{method} {path}");
    }
    // Without the admin token (or a console session): 401, nothing read.
    for auth in [None, Some("Bearer wrong-token")] {
        let headers: Vec<(&str, &str)> = auth.map(|a| ("authorization", a)).into_iter().collect();
        let r = get(&edge.admin_url("/admin/rooms/r1/report"), &headers).await;
        assert_eq!(
            (r.status, r.json()),
            (401, json!({"error": "unauthorized", "message": "a valid admin bearer token (or console session) is required"}))
        );
    }
    // A console session reads it; an embedded room's report says where it is kept.
    let console = edge.console().await;
    let r = console.call("GET", "/admin/rooms/r1/report", "").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!((&v["room"], &v["store"], &v["minutes"], &v["totals"]["joins"]), (&json!("r1"), &json!("embedded"), &json!([]), &json!(0)));
}

/// An embedded sale with the core in the edge (two tickets): two fans are let in and hold a
/// ticket each through the core with their token (holds seen on core requests); the event sells
/// out, and the report says when; a fan joining afterwards is counted as a join, not admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedded_sale_reports_holds_made_at_the_core_and_when_it_sold_out() {
    let edge = edge_with_embedded_sale(
        "Two tickets",
        "park",
        2,
        1,
        "[[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy\"\nprotected = [\"/buy\"]\nrelease = { mode = \"fixed\", rate = 1000.0 }\n",
    );
    let base = format!("http://{}", edge.addr);
    let m = minute_with(40).await;
    let before_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    for user in ["ann", "bob"] {
        let deadline = Instant::now() + Duration::from_secs(8);
        let token = loop {
            let v = request("GET", &format!("{base}/queue/r1"), &[("x-user-id", user), ("accept", "application/json")], b"").await.json();
            if let Some(t) = v["token"].as_str() {
                break t.to_owned();
            }
            assert!(Instant::now() < deadline, "{user} not admitted: {v}");
            tokio::time::sleep(Duration::from_millis(150)).await;
        };
        let body = json!({"sku": "park", "qty": 1, "idempotency_key": format!("k-{user}"), "identity": {}}).to_string();
        let auth = format!("Bearer {token}");
        for _ in 0..2 {
            // The same order twice (a replay): one session, one hold in the report.
            let r = request("POST", &format!("{base}/v1/events/ev-1/holds"), &[("authorization", &auth), ("content-type", "application/json")], body.as_bytes()).await;
            assert!(r.status == 201 || r.status == 200, "{user}: {} {}", r.status, r.text());
        }
    }
    // Sold out: the edge sees it at its next stock poll (every 2 s) and keeps the time.
    let report = report_until(&edge, "the sell-out reported", |v| !v["totals"]["sold_out_at"].is_null()).await;
    let after_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let sold = time::OffsetDateTime::parse(report["totals"]["sold_out_at"].as_str().unwrap(), &time::format_description::well_known::Rfc3339).unwrap();
    let sold_ms = sold.unix_timestamp() * 1000;
    assert!(before_ms - 1000 <= sold_ms && sold_ms <= after_ms, "{report}");
    // A fan arriving after the sell-out joins and is told so (the held tickets may come back).
    let v = request("GET", &format!("{base}/queue/r1"), &[("x-user-id", "cat"), ("accept", "application/json")], b"").await.json();
    assert_eq!((&v["state"], &v["restock_possible"]), (&json!("sold_out"), &json!(true)), "{v}");
    let minute = rfc3339(m);
    let report = report_until(&edge, "three joins, two admissions, two holds", |v| {
        let t = &v["totals"];
        (t["joins"].as_u64(), t["admissions"].as_u64(), t["holds"].as_u64()) == (Some(3), Some(2), Some(2))
    })
    .await;
    assert_eq!(minute_with(0).await, m, "the sale took more than its minute");
    assert_eq!(report["store"], "embedded");
    let r = row(&report, &minute);
    assert_eq!((&r["joins"], &r["admissions"], &r["holds"], &r["released"]), (&json!(3), &json!(2), &json!(2), &json!(2)), "{r}");
    assert_eq!(report["totals"]["drop_offs"], json!({"unused": 0, "abandoned": 0}));
    // The leader's figure of the minute: sold out (the stock poll came before its last tick).
    let report = report_until(&edge, "the minute marked sold out", |v| row(v, &minute)["sold_out"] == true).await;
    assert_eq!(row(&report, &minute)["rate_set"], json!(0.0), "nothing released once sold out: {report}");
}

/// A passthrough room (`queue = "when-needed"`): fans let straight in on the protected path are
/// joins, admissions after no wait, places released and holds at once (the request that let them
/// in reached the page); a second request of the same session is no second hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passthrough_room_reports_each_fan_let_straight_in_as_one_hold() {
    let origin = TestUpstream::start("origin").await;
    let edge = TestEdge::start(&format!(
        "origin = \"{}\"\n{}[[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy\"\nprotected = [\"/buy\"]\n\
         queue = \"when-needed\"\nrelease = {{ mode = \"fixed\", rate = 0.0 }}\n[rooms.passthrough]\nactive-max = 100\n",
        origin.url(),
        hs_tokens()
    ));
    let m = minute_with(30).await;
    // Fans 0 and 1 make one request; fan 2 two.
    for i in 0..3 {
        let mut fan = Fan::default();
        for _ in 0..(1 + i / 2) {
            let r = fan.get(&edge.url("/buy")).await;
            assert_eq!((r.status, r.json()["upstream"].as_str()), (200, Some("origin")), "fan {i}: {}", r.text());
        }
    }
    let minute = rfc3339(m);
    let want = json!({"minute": minute, "joins": 3, "admissions": 3, "holds": 3, "released": 3, "waits": 3,
        "refusals": refusals(&[]), "held_of_admitted": 3, "admitted_of_released": 3, "drop_offs": {"unused": 0, "abandoned": 0}});
    let report = report_until(&edge, "three fans let straight in", |v| {
        v["minutes"].as_array().unwrap().iter().any(|r| counts(r) == want)
    })
    .await;
    assert_eq!(minute_with(0).await, m, "the test took more than its minute");
    let t = &report["totals"];
    assert_eq!((&t["wait_seconds"], &t["drop_offs"]), (&json!({"p50": 1, "p90": 1, "p99": 1}), &json!({"unused": 0, "abandoned": 0})), "{t}");
    assert_eq!(t["wait_histogram"][0], 3, "no wait: the first bucket (≤ 1 s)");
}

/// Sleeps until `left` seconds are left of the current minute; that minute's number.
async fn minute_ending(left: u64) -> u64 {
    let now = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    let in_minute = (now().as_millis() % 60_000) as u64;
    let at = (60 - left) * 1000;
    let wait = if in_minute <= at { at - in_minute } else { 60_000 - in_minute + at };
    tokio::time::sleep(Duration::from_millis(wait)).await;
    now().as_secs() / 60
}

/// Drop-offs by cohort across two minutes (one edge, or two sharing Redis): a session admitted in
/// one minute and used in the next counts as used in its admission's minute; a fan whose turn came
/// in one minute and who comes for it in the next counts in the turn's minute; a later use moves an
/// earlier minute's `unused` down. JSON, totals (the sums of the minutes) and CSV agree.
async fn drop_offs_by_cohort(redis: Option<&RedisServer>) {
    let origin = TestUpstream::start("origin").await;
    let conf = format!(
        "origin = \"{}\"\n{}\n[[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy\"\nprotected = [\"/buy\"]\n\
         release = {{ mode = \"fixed\", rate = 1000.0 }}\n",
        origin.url(),
        hs_tokens()
    );
    let (a, b) = match redis {
        Some(r) => {
            let store = format!("store = \"{}\"", r.url());
            (TestEdge::start_full(&store, &conf, &[], &[]), Some(TestEdge::start_full(&store, &conf, &[], &[])))
        }
        None => (TestEdge::start(&conf), None),
    };
    let base_a = format!("http://{}", a.addr);
    let base_b = b.as_ref().map_or(base_a.clone(), |b| format!("http://{}", b.addr));
    let m = minute_ending(9).await;
    // Minute m: P (edge A) and Q (edge B) are admitted; R joins and is released, but is away.
    let (mut p, mut q, mut r) = (Fan::default(), Fan::default(), Fan::default());
    assert_eq!(p.join(&base_a, "r1").await.status, 200);
    admitted(&mut p, &base_a).await;
    assert_eq!(q.join(&base_b, "r1").await.status, 200);
    admitted(&mut q, &base_b).await;
    assert_eq!(r.join(&base_a, "r1").await.status, 200);
    // (R's place is released at the next tick, and every edge sees it within a tick.)
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(minute_with(0).await, m, "minute m's part took too long");
    tokio::time::sleep(Duration::from_millis(60_000 - (unix_ms() % 60_000) + 300)).await;
    // Minute m + 1: P buys (through B); R comes back for its turn (through B) and is admitted;
    // S joins and never comes back.
    assert_eq!(fan_get(&p, &base_b, "/buy").await.status, 200);
    let s = r.status(&base_b, "r1").await;
    assert_eq!(s["state"], "admitted", "{s}");
    let mut later = Fan::default();
    assert_eq!(later.join(&base_a, "r1").await.status, 200);
    let (mm, m1) = (rfc3339(m), rfc3339(m + 1));
    let want_m = json!({"minute": mm, "joins": 3, "admissions": 2, "holds": 0, "released": 3, "refusals": refusals(&[]), "waits": 2,
        "held_of_admitted": 1, "admitted_of_released": 3, "drop_offs": {"unused": 1, "abandoned": 0}});
    let want_m1 = json!({"minute": m1, "joins": 1, "admissions": 1, "holds": 1, "released": 1, "refusals": refusals(&[]), "waits": 1,
        "held_of_admitted": 0, "admitted_of_released": 0, "drop_offs": {"unused": 1, "abandoned": 1}});
    let v = report_until(&a, "both minutes by cohort", |v| {
        let rows: Vec<Value> = v["minutes"].as_array().unwrap().iter().map(counts).collect();
        rows == [want_m.clone(), want_m1.clone()]
    })
    .await;
    let t = &v["totals"];
    assert_eq!(
        (&t["admissions"], &t["holds"], &t["released"], &t["held_of_admitted"], &t["admitted_of_released"], &t["drop_offs"]),
        (&json!(3), &json!(1), &json!(4), &json!(1), &json!(3), &json!({"unused": 2, "abandoned": 1})),
        "{t}"
    );
    // R buys too (through A): minute m + 1's admission is used after all.
    assert_eq!(fan_get(&r, &base_a, "/buy").await.status, 200);
    let v = report_until(&a, "R's use counted in its admission's minute", |v| row(v, &m1)["drop_offs"]["unused"] == 0).await;
    assert_eq!(row(&v, &m1)["held_of_admitted"], 1);
    assert_eq!(row(&v, &m1)["holds"], 2, "P's hold and R's: both happened in m + 1");
    assert_eq!(v["totals"]["drop_offs"], json!({"unused": 1, "abandoned": 1}));
    // Edge B reads the same; the CSV's drop-off columns say the same.
    let on = b.as_ref().unwrap_or(&a);
    let v = report_until(on, "the other edge agrees", |w| w["minutes"] == v["minutes"]).await;
    assert_eq!(v["totals"]["drop_offs"], json!({"unused": 1, "abandoned": 1}));
    let csv = on.admin("GET", "/admin/rooms/r1/report?format=csv", "").await.text();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let col = |line: &str, name: &str| line.split(',').nth(header.iter().position(|h| *h == name).unwrap()).unwrap().to_owned();
    let lines: Vec<&str> = csv.lines().skip(1).collect();
    assert_eq!(lines.len(), 2, "{csv}");
    let cells = |l: &str| ["unused", "abandoned", "held_of_admitted", "admitted_of_released"].map(|n| col(l, n));
    assert_eq!(cells(lines[0]), ["1", "0", "1", "3"], "{csv}");
    assert_eq!(cells(lines[1]), ["0", "1", "1", "0"], "{csv}");
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_offs_are_counted_by_cohort_across_minutes_on_two_edges_sharing_redis() {
    let redis = RedisServer::start();
    drop_offs_by_cohort(Some(&redis)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_offs_are_counted_by_cohort_across_minutes_on_an_embedded_edge() {
    drop_offs_by_cohort(None).await;
}

/// What the room's own endpoints refuse is counted in its report by reason: no ticket, a bad
/// join, a wrong method, an unknown endpoint, reject-all (page and join), invite-only, a malformed
/// and an unknown invite code, a closed room, a wrong proof.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rooms_own_refusals_are_counted_by_reason() {
    let origin = TestUpstream::start("origin").await;
    let past = |h: i64| {
        (time::OffsetDateTime::now_utc() - time::Duration::hours(h)).format(&time::format_description::well_known::Rfc3339).unwrap()
    };
    let edge = TestEdge::start(&format!(
        "origin = \"{}\"\n{}\n[[rooms]]\nid = \"r1\"\nevent = \"ev-1\"\ntarget = \"/buy\"\nprotected = [\"/buy\"]\nbot-check = \"pow\"\n\
         [[rooms]]\nid = \"r2\"\nevent = \"ev-2\"\ntarget = \"/buy2\"\nprotected = [\"/buy2\"]\n[rooms.invite]\nonly = true\n\
         [[rooms]]\nid = \"r3\"\nevent = \"ev-3\"\ntarget = \"/buy3\"\nprotected = [\"/buy3\"]\n\
         schedule = {{ opens-at = \"{}\", closes-at = \"{}\" }}\n",
        origin.url(),
        hs_tokens(),
        past(2),
        past(1)
    ));
    let base = format!("http://{}", edge.addr);
    let json_h = [("accept", "application/json"), ("user-agent", "fan")];
    let call = |method: &'static str, path: &'static str, body: &'static [u8]| {
        let url = format!("{base}{path}");
        async move { request(method, &url, &json_h, body).await }
    };
    let cases: &[(&str, &str, &[u8], u16, &str)] = &[
        ("GET", "/queue/r1/status", b"", 401, "unauthorized"),
        ("GET", "/queue/r1/events", b"", 401, "unauthorized"),
        ("POST", "/queue/r1/join", b"{not json", 400, "bad_request"),
        ("POST", "/queue/r1/join", br#"{"pow":{"challenge":"forged","nonce":"1"}}"#, 403, "forbidden"),
        ("PUT", "/queue/r1/join", b"", 405, "bad_request"),
        ("GET", "/queue/r1/nope", b"", 404, "not_found"),
        ("GET", "/queue/r2", b"", 403, "invite_only"),
        ("POST", "/queue/r2/invite", br#"{"code":"no!"}"#, 400, "bad_request"),
        ("POST", "/queue/r2/invite", br#"{"code":"NOSUCHCODE1"}"#, 403, "invite_invalid"),
        ("POST", "/queue/r2/invite", b"[]", 400, "bad_request"),
    ];
    for (method, path, body, status, code) in cases {
        let r = call(method, path, body).await;
        assert_eq!((r.status, r.json()["error"].as_str()), (*status, Some(*code)), "{method} {path}: {}", r.text());
    }
    // Reject-all: a new fan's page and join say closed (200), each counted.
    assert_eq!(edge.admin("POST", "/admin/rooms/r1/reject-all", "").await.status, 200);
    for (method, path) in [("GET", "/queue/r1"), ("POST", "/queue/r1/join")] {
        let r = call(method, path, b"{}").await;
        assert_eq!((r.status, r.json()["state"].as_str()), (200, Some("closed")), "{method} {path}: {}", r.text());
    }
    // A room past its closing: the page says closed.
    let r = call("GET", "/queue/r3", b"").await;
    assert_eq!(r.json()["state"], "closed", "{}", r.text());
    let total = |id: &'static str| {
        let edge = &edge;
        async move { edge.admin("GET", &format!("/admin/rooms/{id}/report"), "").await.json()["totals"]["refusals"].clone() }
    };
    let want1 = refusals(&[("no_ticket", 2), ("bad_request", 2), ("bot_failed", 1), ("other", 1), ("reject_all", 2)]);
    let want2 = refusals(&[("invite_only", 1), ("bad_request", 2), ("invite_invalid", 1)]);
    let want3 = refusals(&[("room_closed", 1)]);
    let deadline = Instant::now() + Duration::from_secs(6);
    loop {
        let got = (total("r1").await, total("r2").await, total("r3").await);
        if got == (want1.clone(), want2.clone(), want3.clone()) {
            break;
        }
        assert!(Instant::now() < deadline, "{got:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
