//! The conformance suite on the Redis store: a fresh `redis-server` per test (wicket-testkit), real time.
//!
//! `cargo nextest run -p wicket-core --test redis`

mod conformance;

use std::sync::Arc;

use conformance::OnRedis;
use wicket_core::store::redis::RedisStore;
use wicket_testkit::RedisServer;

async fn redis() -> OnRedis<RedisServer> {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url()).await.expect("connect to the test redis");
    OnRedis { store: Arc::new(store), servers: server }
}

conformance_suite!(redis);

/// The largest event the API allows, a pool of 100,000 named seats: created and updated in one script
/// call each (well under Redis's busy-script limit), and a hold still only touches the seats it takes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hundred_thousand_seats() {
    use std::time::{Duration, Instant};
    use wicket_core::model::*;
    let h = redis().await;
    let s = h.store.clone();
    let now = s.now_ms().await.unwrap();
    let mut spec = conformance::spec(now, 10, 10, 1, &[]);
    spec.pools[2].seats = Some((0..MAX_SEATS).map(|i| format!("S-{i}")).collect());
    let t0 = Instant::now();
    assert_eq!(s.put_event("stadium", &spec, false).await.unwrap(), PutEventOutcome::Created);
    let created_in = t0.elapsed();
    assert!(created_in < Duration::from_secs(5), "{created_in:?}");
    let mut r = conformance::req("stadium", "u1", "stalls", 3);
    r.seats = vec!["S-99999".into(), "S-0".into(), "S-5".into()];
    conformance::Refingerprint::refingerprint(&mut r);
    let o = conformance::created(&*s, &r).await;
    assert_eq!(o.seats, vec!["S-99999", "S-0", "S-5"]);
    let o = conformance::created(&*s, &conformance::req("stadium", "u2", "stalls", 3)).await;
    assert_eq!(o.seats, vec!["S-1", "S-2", "S-3"], "the first free seats, in the body's order");
    // Seats added at the end (the sale is open: force).
    spec.pools[2].seats.as_mut().unwrap().truncate(MAX_SEATS - 10);
    spec.pools[2].seats.as_mut().unwrap().push("S-99999".into());
    let t0 = Instant::now();
    assert_eq!(s.put_event("stadium", &spec, true).await.unwrap(), PutEventOutcome::Updated);
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    let stalls = conformance::pool(&*s, "stadium", "stalls").await;
    assert_eq!((stalls.capacity, stalls.held), ((MAX_SEATS - 9) as u64, 6));
    conformance::assert_invariants(&*s, "stadium").await;
}

/// lua/hold.lua's pause and the waitlist (issue #39): a paused event answers `Paused` before the list is
/// read, but a fan on it that asks meanwhile keeps its turn — its entry's `seen` (`turn|seen|until|qty|pools`
/// in `wk:{ev:<id>}:wait`) moves to the ask, the rest unchanged; a fan not on it is not added. (The lapse
/// itself, 10 s of real time, is the embedded store's test on a manual clock; the differential test holds
/// both stores to the same answers.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_ask_keeps_a_waitlist_turn() {
    use wicket_core::model::*;
    let h = redis().await;
    let s = h.store.clone();
    let now = s.now_ms().await.unwrap();
    s.put_event("ev", &conformance::spec(now, 1, 1, 1, &[]), false).await.unwrap();
    conformance::created(&*s, &conformance::req("ev", "a", "park", 1)).await;
    let cat = HoldRequest { wait: true, ..conformance::req("ev", "cat", "park", 1) };
    let dan = HoldRequest { wait: true, ..conformance::req("ev", "dan", "park", 1) };
    assert_eq!(s.hold(&cat).await.unwrap(), conformance::waits(0, 1, 0));
    let mut raw = redis::Client::open(h.servers.url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let entry = |raw: &mut redis::aio::MultiplexedConnection, jti: String| {
        let mut raw = raw.clone();
        async move {
            let v: Option<String> = redis::cmd("HGET").arg("wk:{ev:ev}:wait").arg(jti).query_async(&mut raw).await.unwrap();
            v.map(|v| v.split('|').map(str::to_owned).collect::<Vec<_>>())
        }
    };
    let before = entry(&mut raw, cat.jti.clone()).await.expect("cat is on the list");
    assert!(s.set_paused("ev", true).await.unwrap());
    tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    assert_eq!(s.hold(&cat).await.unwrap(), HoldOutcome::Paused);
    assert_eq!(s.hold(&dan).await.unwrap(), HoldOutcome::Paused);
    let after = entry(&mut raw, cat.jti.clone()).await.expect("cat is still on the list");
    assert_eq!((&after[0], &after[2..]), (&before[0], &before[2..]), "its turn, token expiry, tickets and pools");
    let (seen0, seen1): (i64, i64) = (before[1].parse().unwrap(), after[1].parse().unwrap());
    assert!(seen1 >= seen0 + 30, "the paused ask counts: seen {seen0} → {seen1}");
    assert_eq!(entry(&mut raw, dan.jti.clone()).await, None, "a paused ask puts nobody on the list");
    // A hold that does not ask to wait does not renew it either.
    let quiet = HoldRequest { wait: false, ..cat.clone() };
    tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    assert_eq!(s.hold(&quiet).await.unwrap(), HoldOutcome::Paused);
    assert_eq!(entry(&mut raw, cat.jti.clone()).await.unwrap()[1], after[1]);
}
