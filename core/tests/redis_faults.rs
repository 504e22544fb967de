//! The Redis store under the faults of a sale day: a flushed script cache, a SIGKILLed server, a connection
//! cut after a hold was sent, a dead Redis, and several core instances on one Redis.
//!
//! `cargo nextest run -p wicket-core --test redis_faults`

mod conformance;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use conformance::{Refingerprint, assert_invariants, req};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use wicket_core::model::*;
use wicket_core::store::redis::RedisStore;
use wicket_core::store::{DynStore, SaleStore, StoreError};
use wicket_testkit::RedisServer;

fn ts(ms: i64) -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp_nanos(ms as i128 * 1_000_000).unwrap()
}

/// One general-admission pool of `cap`, SKU `ga` (max 6), no limits, open now.
async fn ga_event(s: &dyn SaleStore, id: &str, cap: u32) {
    let now = s.now_ms().await.unwrap();
    let spec = EventSpec {
        name: "faults".into(),
        opens_at: ts(now - 60_000),
        closes_at: ts(now + 3_600_000),
        hold_seconds: 900,
        pools: vec![PoolSpec { id: "ga".into(), capacity: Some(cap), seats: None }],
        skus: vec![SkuSpec { id: "ga".into(), pools: vec!["ga".into()], price_cents: 100, max_qty: None }],
        limits: vec![],
    };
    assert_eq!(s.put_event(id, &spec, false).await.unwrap(), PutEventOutcome::Created);
}

/// Holds with `r` until the store answers, retrying the same request (same idempotency key) on errors, as the
/// core does. Returns the outcome and how many errors it took.
async fn hold_retrying(s: &dyn SaleStore, r: &HoldRequest, give_up: Duration) -> (HoldOutcome, u32) {
    let start = Instant::now();
    let mut errors = 0;
    loop {
        match s.hold(r).await {
            Ok(o) => return (o, errors),
            Err(e) => {
                errors += 1;
                assert!(start.elapsed() < give_up, "hold kept failing: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// A buyer's order id, whether this attempt created it or replayed it.
fn order_of(o: &HoldOutcome) -> Option<&Order> {
    match o {
        HoldOutcome::Created(o) | HoldOutcome::Replay(o) => Some(o),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn script_flush_is_survived() {
    let server = RedisServer::start();
    let s = RedisStore::connect(&server.url()).await.unwrap();
    ga_event(&s, "flush", 10).await;
    conformance::created(&s, &req("flush", "u1", "ga", 1)).await;
    assert_eq!(server.cli(&["SCRIPT", "FLUSH"]).trim(), "OK");
    assert_eq!(server.cli(&["SCRIPT", "EXISTS", wicket_core::store::redis::scripts::HOLD.get_hash()]).trim(), "0");
    // The next hold answers NOSCRIPT first; the store loads the script and runs it, transparently.
    conformance::created(&s, &req("flush", "u2", "ga", 1)).await;
    assert_eq!(server.cli(&["SCRIPT", "EXISTS", wicket_core::store::redis::scripts::HOLD.get_hash()]).trim(), "1");
    assert_eq!(s.stock("flush").await.unwrap().unwrap().pools["ga"].held, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn script_flush_during_a_concurrent_sale() {
    let server = RedisServer::start();
    let s: DynStore = Arc::new(RedisStore::connect(&server.url()).await.unwrap());
    ga_event(&*s, "flushsale", 1000).await;
    let stop = Arc::new(AtomicBool::new(false));
    let flushes = Arc::new(AtomicU64::new(0));
    let flusher = {
        let (stop, flushes, port) = (stop.clone(), flushes.clone(), server.port());
        tokio::task::spawn_blocking(move || {
            while !stop.load(Ordering::Relaxed) {
                assert_eq!(wicket_testkit::send_inline(port, "SCRIPT FLUSH").as_deref(), Some("+OK\r\n"));
                flushes.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    while flushes.load(Ordering::Relaxed) == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let errors = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for t in 0..64 {
        let (s, errors) = (s.clone(), errors.clone());
        tasks.push(tokio::spawn(async move {
            let mut mine = 0u64;
            loop {
                let r = req("flushsale", &format!("u{t}"), "ga", 1);
                loop {
                    match s.hold(&r).await {
                        Ok(HoldOutcome::Created(_)) => {
                            mine += 1;
                            break;
                        }
                        Ok(HoldOutcome::SoldOut(_)) => return mine,
                        Ok(other) => panic!("unexpected {other:?}"),
                        Err(_) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    flusher.await.unwrap();
    assert!(flushes.load(Ordering::Relaxed) >= 3, "the cache was hardly flushed during the sale");
    assert_eq!(errors.load(Ordering::Relaxed), 0, "holds failed while the script cache was flushed");
    assert_eq!(total, 1000);
    let p = s.stock("flushsale").await.unwrap().unwrap().pools["ga"];
    assert_eq!((p.available, p.held), (0, 1000));
    assert_invariants(&*s, "flushsale").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_mid_sale_loses_nothing_acknowledged() {
    let mut server = RedisServer::start_aof();
    let s: DynStore = Arc::new(RedisStore::connect(&server.url()).await.unwrap());
    ga_event(&*s, "kill", 400).await;
    // Each buyer: hold (retrying with the same key), then pay (retrying with the same txn).
    // What the store acknowledged is recorded; after the crash it must all still be there.
    let mut tasks = Vec::new();
    for t in 0..32 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let mut acked: Vec<(String, OrderState)> = Vec::new();
            let mut errors = 0;
            for i in 0.. {
                let r = req("kill", &format!("u{t}-{i}"), "ga", 1);
                let (o, e) = hold_retrying(&*s, &r, Duration::from_secs(30)).await;
                errors += e;
                let Some(order) = order_of(&o).cloned() else {
                    assert!(matches!(o, HoldOutcome::SoldOut(_)), "{o:?}");
                    return (acked, errors);
                };
                acked.push((order.order_id.clone(), OrderState::Created));
                if i % 2 == 0 {
                    let pay = PaymentRequest { order_id: order.order_id.clone(), txn_id: format!("txn-{t}-{i}"), amount_cents: 100 };
                    loop {
                        match s.pay(&pay).await {
                            Ok(PayOutcome::Paid(_) | PayOutcome::AlreadyPaid(_)) => {
                                acked.last_mut().unwrap().1 = OrderState::Paid;
                                break;
                            }
                            Ok(other) => panic!("unexpected {other:?}"),
                            Err(_) => {
                                errors += 1;
                                tokio::time::sleep(Duration::from_millis(50)).await;
                            }
                        }
                    }
                }
            }
            unreachable!()
        }));
    }
    // Let the sale run, then kill Redis without warning and bring it back on the same port and dir.
    loop {
        let p = s.stock("kill").await.unwrap().unwrap().pools["ga"];
        if p.held + p.sold >= 120 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    server.kill9();
    let down = Instant::now();
    // While it is down, calls fail fast instead of hanging.
    let t0 = Instant::now();
    let err = s.stock("kill").await.unwrap_err();
    assert!(t0.elapsed() < Duration::from_millis(2500), "a call to a dead Redis took {:?}", t0.elapsed());
    assert!(matches!(err, StoreError::Unavailable(_) | StoreError::OutcomeUnknown(_)), "{err:?}");
    tokio::time::sleep(Duration::from_millis(700)).await;
    server.restart();
    let mut acked = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (a, e) = t.await.unwrap();
        acked.extend(a);
        errors += e;
    }
    assert!(errors > 0, "the crash went unnoticed: did the kill happen mid-sale?");
    assert!(down.elapsed() < Duration::from_secs(30));
    // Every acknowledged hold and payment is still there, in the same store object (it reconnected).
    let mut paid = 0;
    for (id, state) in &acked {
        let o = s.get_order(id).await.unwrap().unwrap_or_else(|| panic!("acknowledged order {id} lost"));
        assert_eq!(o.state, *state, "order {id}");
        if *state == OrderState::Paid {
            paid += 1;
        }
    }
    let p = s.stock("kill").await.unwrap().unwrap().pools["ga"];
    assert_eq!(p.available, 0, "{p:?}");
    assert_eq!(p.held + p.sold, acked.len() as u64, "every ticket belongs to an acknowledged order: {p:?}");
    assert_eq!(p.sold, paid);
    assert_invariants(&*s, "kill").await;
}

/// A TCP proxy in front of Redis that, when armed, forwards the next script call and then cuts both
/// connections without passing the answer back.
struct CuttingProxy {
    port: u16,
    armed: Arc<AtomicBool>,
    cuts: Arc<AtomicU64>,
}

impl CuttingProxy {
    async fn start(upstream: u16) -> CuttingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let armed = Arc::new(AtomicBool::new(false));
        let cuts = Arc::new(AtomicU64::new(0));
        let (a, c) = (armed.clone(), cuts.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (armed, cuts) = (a.clone(), c.clone());
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else { return };
                    let (mut cr, mut cw) = client.into_split();
                    let (mut sr, mut sw) = server.into_split();
                    // Set before the fatal request is forwarded, so its answer is dropped, never passed on.
                    let cut = Arc::new(AtomicBool::new(false));
                    let cut_down = cut.clone();
                    let down = tokio::spawn(async move {
                        let mut buf = vec![0u8; 64 * 1024];
                        loop {
                            let n = match sr.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => n,
                            };
                            if cut_down.load(Ordering::SeqCst) || cw.write_all(&buf[..n]).await.is_err() {
                                return; // drops the client's socket
                            }
                        }
                    });
                    let mut buf = vec![0u8; 64 * 1024];
                    loop {
                        let n = match cr.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        let chunk = &buf[..n];
                        let fatal = chunk.windows(7).any(|w| w == b"EVALSHA") && armed.swap(false, Ordering::SeqCst);
                        if fatal {
                            cut.store(true, Ordering::SeqCst);
                            cuts.fetch_add(1, Ordering::SeqCst);
                        }
                        if sw.write_all(chunk).await.is_err() {
                            break;
                        }
                        if fatal {
                            // The request reached Redis; its answer ends the client's connection instead.
                            let _ = down.await;
                            return;
                        }
                    }
                    down.abort();
                });
            }
        });
        CuttingProxy { port, armed, cuts }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn connection_cut_after_a_hold_was_sent_then_retry_gives_one_order() {
    let server = RedisServer::start();
    let proxy = CuttingProxy::start(server.port()).await;
    let s = RedisStore::connect(&format!("redis://127.0.0.1:{}/0", proxy.port)).await.unwrap();
    ga_event(&s, "cut", 10).await;
    conformance::created(&s, &req("cut", "warm", "ga", 1)).await; // the script is loaded: the next EVALSHA runs

    let r = req("cut", "buyer", "ga", 2);
    proxy.armed.store(true, Ordering::SeqCst);
    let first = s.hold(&r).await;
    assert_eq!(proxy.cuts.load(Ordering::SeqCst), 1);
    assert!(matches!(first, Err(StoreError::OutcomeUnknown(_))), "a cut after sending is outcome unknown: {first:?}");

    // The client retries with the same idempotency key (the core may mint a new order id: the key decides).
    let mut again = r.clone();
    again.order_id = new_order_id("cut");
    let (o, _) = hold_retrying(&s, &again, Duration::from_secs(10)).await;
    let HoldOutcome::Replay(order) = o else { panic!("expected the first attempt's order, got {o:?}") };
    assert_eq!(order.order_id, r.order_id, "the order the lost answer was about");
    let p = s.stock("cut").await.unwrap().unwrap().pools["ga"];
    assert_eq!(p.held, 3, "exactly one order for the buyer (plus the warm-up): {p:?}");
    assert!(s.get_order(&again.order_id).await.unwrap().is_none());
    assert_invariants(&s, "cut").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dead_redis_fails_fast_and_the_store_recovers_by_itself() {
    let mut server = RedisServer::start();
    let s = RedisStore::connect(&server.url()).await.unwrap();
    ga_event(&s, "down", 10).await;
    server.kill9();
    for _ in 0..3 {
        let t0 = Instant::now();
        let r = s.hold(&req("down", "u", "ga", 1)).await;
        assert!(t0.elapsed() < Duration::from_millis(2500), "took {:?}", t0.elapsed());
        assert!(matches!(r, Err(StoreError::Unavailable(_) | StoreError::OutcomeUnknown(_))), "{r:?}");
    }
    server.restart();
    let t0 = Instant::now();
    loop {
        match s.now_ms().await {
            Ok(_) => break,
            Err(e) => assert!(t0.elapsed() < Duration::from_secs(10), "no recovery: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Without persistence the event is gone; the store itself works again.
    assert!(s.get_event("down").await.unwrap().is_none());
    ga_event(&s, "down", 10).await;
    conformance::created(&s, &req("down", "u", "ga", 1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hung_redis_times_out_as_outcome_unknown_then_recovers() {
    let server = RedisServer::start();
    let s = RedisStore::connect(&server.url()).await.unwrap();
    ga_event(&s, "hung", 10).await;
    server.freeze();
    let r = req("hung", "u", "ga", 1);
    let t0 = Instant::now();
    let first = s.hold(&r).await;
    let took = t0.elapsed();
    assert!(matches!(first, Err(StoreError::OutcomeUnknown(_))), "sent, no answer: {first:?}");
    assert!(took < Duration::from_millis(2500), "took {took:?}");
    server.thaw();
    // The request may have run once Redis woke up; the retry with the same key finds out.
    let (o, _) = hold_retrying(&s, &r, Duration::from_secs(10)).await;
    assert!(matches!(o, HoldOutcome::Created(_) | HoldOutcome::Replay(_)), "{o:?}");
    assert_eq!(s.stock("hung").await.unwrap().unwrap().pools["ga"].held, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_connection_is_unavailable() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let t0 = Instant::now();
    let r = RedisStore::connect(&format!("redis://127.0.0.1:{port}/0")).await;
    assert!(matches!(r, Err(StoreError::Unavailable(_))), "{:?}", r.err());
    assert!(t0.elapsed() < Duration::from_secs(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_core_instances_sell_exactly_the_capacity() {
    let server = RedisServer::start();
    let a: DynStore = Arc::new(RedisStore::connect(&server.url()).await.unwrap());
    let b: DynStore = Arc::new(RedisStore::connect(&server.url()).await.unwrap());
    ga_event(&*a, "two", 1000).await;
    let mut tasks = Vec::new();
    for t in 0..64 {
        let s = if t % 2 == 0 { a.clone() } else { b.clone() };
        tasks.push(tokio::spawn(async move {
            let mut mine = 0u64;
            for i in 0.. {
                let mut r = req("two", &format!("u{t}-{i}"), "ga", 1 + (i % 3) as u32);
                if i % 5 == 4 {
                    r.qty = 1;
                    r.refingerprint();
                }
                match s.hold(&r).await.unwrap() {
                    HoldOutcome::Created(o) => mine += o.qty as u64,
                    HoldOutcome::SoldOut(_) if r.qty == 1 => return mine,
                    HoldOutcome::SoldOut(_) => {}
                    other => panic!("unexpected {other:?}"),
                }
            }
            unreachable!()
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    assert_eq!(total, 1000, "exactly the capacity was held");
    for s in [&a, &b] {
        let p = s.stock("two").await.unwrap().unwrap().pools["ga"];
        assert_eq!((p.available, p.held, p.sold), (0, 1000, 0));
        assert!(s.stock("two").await.unwrap().unwrap().skus["ga"].sold_out);
    }
    assert_invariants(&*a, "two").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_sweeper_lease_across_instances() {
    let server = RedisServer::start();
    let a = RedisStore::connect(&server.url()).await.unwrap();
    let b = RedisStore::connect(&server.url()).await.unwrap();
    assert!(a.try_lease("sweeper", "core-a", 300).await.unwrap());
    assert!(!b.try_lease("sweeper", "core-b", 300).await.unwrap());
    assert!(a.try_lease("sweeper", "core-a", 300).await.unwrap(), "renewal");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(b.try_lease("sweeper", "core-b", 300).await.unwrap(), "taken over once expired");
    assert!(!a.try_lease("sweeper", "core-a", 300).await.unwrap());
}

/// Under `maxmemory` with nothing evictable, a hold is refused before it runs (the `#!lua` shebang), so
/// nothing is half-written, and the store says `Unavailable`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn out_of_memory_refuses_holds_before_they_run() {
    let server = RedisServer::start_with(&["--appendonly", "no", "--maxmemory-policy", "noeviction"]);
    let s = RedisStore::connect(&server.url()).await.unwrap();
    ga_event(&s, "oom", 100).await;
    conformance::created(&s, &req("oom", "u0", "ga", 1)).await;
    // Memory is now over the limit (nothing evictable): plain writes are refused, and so are writing scripts.
    let mut raw = redis::Client::open(server.url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg("1").query_async(&mut raw).await.unwrap();
    let e = redis::cmd("SET").arg("ballast").arg("x").query_async::<()>(&mut raw).await.unwrap_err();
    assert_eq!(e.code(), Some("OOM"), "{e}");
    // Read-only scripts (`flags=no-writes`) still answer.
    let before = s.stock("oom").await.unwrap().unwrap();
    let r = s.hold(&req("oom", "u1", "ga", 1)).await;
    assert!(matches!(r, Err(StoreError::Unavailable(ref m)) if m.contains("OOM")), "{r:?}");
    assert_eq!(s.stock("oom").await.unwrap().unwrap(), before, "nothing written");
}
