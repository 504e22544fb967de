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
