//! The durable embedded store (`store = "embedded"`): the conformance suite on a temp data dir, then its own
//! checks: recovery from snapshot + journal gives back the state before, a torn last write is cut, write
//! errors are refused and rolled back, and a nearly full disk refuses holds but takes payments.

mod conformance;

use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};
use wicket_core::clock::ManualClock;
use wicket_core::model::*;
use wicket_core::store::embedded::{DiskOptions, EmbeddedStore};
use wicket_core::store::{DynStore, SaleStore, StoreError};

/// 2026-12-01T03:00:00Z: an hour into the example sale.
const T0: i64 = 1_764_558_000_000;

struct Durable {
    store: DynStore,
    clock: Arc<ManualClock>,
    _dir: tempfile::TempDir,
}

#[async_trait::async_trait]
impl conformance::Harness for Durable {
    fn store(&self) -> DynStore {
        self.store.clone()
    }
    async fn advance_ms(&self, ms: i64) {
        self.clock.advance_ms(ms);
    }
    fn cheap_time(&self) -> bool {
        true
    }
}

fn small_snapshots() -> DiskOptions {
    // A snapshot every 16 KiB of journal, so the suite runs across many snapshots and journal files.
    DiskOptions { reserve_bytes: 0, snapshot_bytes: 16 << 10, test_free_bytes: None }
}

async fn durable() -> Durable {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = EmbeddedStore::open_with_clock(dir.path(), small_snapshots(), clock.clone()).expect("open the data dir");
    Durable { store: Arc::new(store), clock, _dir: dir }
}

conformance_suite!(durable);

fn open(dir: &Path, clock: &Arc<ManualClock>, opts: DiskOptions) -> Arc<EmbeddedStore> {
    Arc::new(EmbeddedStore::open_with_clock(dir, opts, clock.clone()).expect("open the data dir"))
}

/// Everything the API can see of a store: events, stock, every order, the outbox, the reconciliation.
async fn dump(s: &dyn SaleStore) -> Value {
    let mut events = serde_json::Map::new();
    for id in s.list_events().await.unwrap() {
        let rec = s.get_event(&id).await.unwrap().unwrap();
        let outbox = s.outbox(&id, None, 1000).await.unwrap();
        let mut orders = serde_json::Map::new();
        for e in &outbox {
            let o = s.get_order(&e.order_id).await.unwrap().unwrap();
            orders.insert(o.order_id.clone(), serde_json::to_value(&o).unwrap());
        }
        let (created, _) = s.created_orders(&id, None, 100_000).await.unwrap();
        events.insert(
            id.clone(),
            json!({
                "spec": rec.spec, "paused": rec.paused,
                "stock": s.stock(&id).await.unwrap(),
                "outbox": outbox, "orders": orders, "created": created,
                "reconcile": s.reconcile(&id).await.unwrap(),
            }),
        );
    }
    Value::Object(events)
}

/// A mixed history on `s`: holds (named seats, combos, limits), payments, cancels, expiries, a refund, a
/// redemption, a pause and an event update.
async fn history(s: &dyn SaleStore, clock: &ManualClock, ev: &str) -> Vec<Order> {
    let now = s.now_ms().await.unwrap();
    let spec = conformance::spec(now, 50, 20, 30, &[(Dimension::User, 4)]);
    assert_eq!(s.put_event(ev, &spec, false).await.unwrap(), PutEventOutcome::Created);
    let mut orders = Vec::new();
    for i in 0..40 {
        let sku = ["park", "park+zoo", "stalls"][i % 3];
        let r = conformance::req(ev, &format!("u{}", i % 13), sku, 1 + (i % 2) as u32);
        if let HoldOutcome::Created(o) = s.hold(&r).await.unwrap() {
            orders.push(o);
        }
    }
    for (i, o) in orders.iter().enumerate() {
        match i % 4 {
            0 => {
                let _ = s.pay(&PaymentRequest { order_id: o.order_id.clone(), txn_id: format!("t{i}"), amount_cents: o.amount_cents }).await.unwrap();
            }
            1 => {
                let _ = s.close(&o.order_id, CloseReason::Cancelled).await.unwrap();
            }
            _ => {}
        }
    }
    let _ = s.refund(&orders[0].order_id).await.unwrap();
    let _ = s.redeem(&orders[4].order_id, None).await.unwrap();
    // A payment for a closed order: refund_required in the outbox.
    let _ = s.pay(&PaymentRequest { order_id: orders[1].order_id.clone(), txn_id: "late".into(), amount_cents: orders[1].amount_cents }).await.unwrap();
    assert!(s.set_paused(ev, true).await.unwrap());
    assert!(s.set_paused(ev, false).await.unwrap());
    let mut bigger = spec.clone();
    bigger.pools[0].capacity = Some(60);
    assert_eq!(s.put_event(ev, &bigger, true).await.unwrap(), PutEventOutcome::Updated);
    clock.advance_ms(901_000);
    for (id, _) in s.due_holds(ev, 100).await.unwrap() {
        let _ = s.close(&id, CloseReason::Expired).await.unwrap();
    }
    orders
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_and_journal_give_back_the_state_before() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let opts = DiskOptions { reserve_bytes: 0, snapshot_bytes: 8 << 10, test_free_bytes: None };
    let s = open(dir.path(), &clock, opts.clone());
    history(&*s, &clock, "ev-a").await;
    history(&*s, &clock, "ev-b").await;
    let before = dump(&*s).await;
    assert!(before["ev-a"]["stock"]["holds"].as_u64() > Some(2), "the holds counted are part of what must survive: {}", before["ev-a"]["stock"]);
    drop(s);
    let names: Vec<String> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(names.iter().any(|n| n.ends_with(".snap")), "snapshots were taken: {names:?}");
    assert!(names.iter().any(|n| n.ends_with(".wal")), "{names:?}");
    let s = open(dir.path(), &clock, opts.clone());
    assert_eq!(dump(&*s).await, before, "recovered from snapshot + journal");
    // And it goes on from there: the same id space, the same rules (a replay is still a replay).
    history(&*s, &clock, "ev-c").await;
    let before = dump(&*s).await;
    drop(s);
    // Journal only (no snapshot is ever taken at this size).
    let s = open(dir.path(), &clock, DiskOptions { snapshot_bytes: 1 << 30, ..opts });
    assert_eq!(dump(&*s).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let s = open(dir.path(), &clock, small_snapshots());
    let now = s.now_ms().await.unwrap();
    s.put_event("ev", &conformance::spec(now, 1, 1, 1, &[]), false).await.unwrap();
    let r = conformance::req("ev", "alice", "park", 1);
    let o = conformance::created(&*s, &r).await;
    drop(s);
    let s = open(dir.path(), &clock, small_snapshots());
    let mut again = r.clone();
    again.order_id = new_order_id("ev");
    assert_eq!(s.hold(&again).await.unwrap(), HoldOutcome::Replay(o.clone()));
    assert_eq!(
        s.find_replay("ev", "alice", &r.idempotency_key, &r.fingerprint).await.unwrap(),
        Some(HoldOutcome::Replay(o))
    );
    // The token is still spent, and the stock still gone.
    let other = HoldRequest { idempotency_key: "other".into(), ..conformance::req("ev", "bob", "park", 1) };
    let spent = HoldRequest { jti: r.jti.clone(), ..other.clone() };
    assert_eq!(s.hold(&spent).await.unwrap(), HoldOutcome::TokenReplay);
    assert!(matches!(s.hold(&other).await.unwrap(), HoldOutcome::SoldOut(SoldOut { left: 0, .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_last_write_is_cut_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let opts = DiskOptions { reserve_bytes: 0, snapshot_bytes: 1 << 30, test_free_bytes: None };
    let s = open(dir.path(), &clock, opts.clone());
    let now = s.now_ms().await.unwrap();
    s.put_event("ev", &conformance::spec(now, 10, 10, 1, &[]), false).await.unwrap();
    let o = conformance::created(&*s, &conformance::req("ev", "alice", "park", 1)).await;
    let before = dump(&*s).await;
    drop(s);
    // A crash in the middle of the next frame: half a frame of garbage at the end.
    let wal = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().path()).find(|p| p.extension().is_some_and(|x| x == "wal")).unwrap();
    let good = std::fs::metadata(&wal).unwrap().len();
    let mut bytes = std::fs::read(&wal).unwrap();
    bytes.extend_from_slice(b"WKJ1\xff\x00\x00\x00garbage");
    std::fs::write(&wal, bytes).unwrap();
    let s = open(dir.path(), &clock, opts);
    assert_eq!(std::fs::metadata(&wal).unwrap().len(), good, "the torn tail was cut");
    assert_eq!(dump(&*s).await, before);
    assert_eq!(s.get_order(&o.order_id).await.unwrap(), Some(o));
    conformance::created(&*s, &conformance::req("ev", "bob", "park", 1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corruption_in_the_middle_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let opts = DiskOptions { reserve_bytes: 0, snapshot_bytes: 1 << 30, test_free_bytes: None };
    let s = open(dir.path(), &clock, opts.clone());
    let now = s.now_ms().await.unwrap();
    s.put_event("ev", &conformance::spec(now, 10, 10, 1, &[]), false).await.unwrap();
    for u in ["a", "b", "c"] {
        conformance::created(&*s, &conformance::req("ev", u, "park", 1)).await;
    }
    drop(s);
    let wal = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().path()).find(|p| p.extension().is_some_and(|x| x == "wal")).unwrap();
    let mut bytes = std::fs::read(&wal).unwrap();
    bytes[40] ^= 0x20;
    std::fs::write(&wal, &bytes).unwrap();
    let err = EmbeddedStore::open_with_clock(dir.path(), opts, clock.clone()).err().expect("refused");
    assert!(err.contains("corrupt at offset") && err.contains("refusing to start"), "{err}");
    assert_eq!(std::fs::read(&wal).unwrap(), bytes, "nothing was cut");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_process_per_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let s = open(dir.path(), &clock, small_snapshots());
    let err = EmbeddedStore::open_with_clock(dir.path(), small_snapshots(), clock.clone()).err().expect("refused");
    assert!(err.contains("in use by another wicket core") && err.contains(&dir.path().display().to_string()), "{err}");
    drop(s);
    open(dir.path(), &clock, small_snapshots());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nearly_full_disk_refuses_holds_and_takes_payments() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    // 64 KiB reserve, 96 KiB "free": holds until the reserve is reached, then payments from the reserve.
    let opts = DiskOptions { reserve_bytes: 64 << 10, snapshot_bytes: 1 << 30, test_free_bytes: Some(96 << 10) };
    let s = open(dir.path(), &clock, opts);
    let now = s.now_ms().await.unwrap();
    s.put_event("ev", &conformance::spec(now, 100_000, 10, 1, &[]), false).await.unwrap();
    let mut orders = Vec::new();
    let refused = loop {
        let r = conformance::req("ev", &format!("u{}", orders.len()), "park", 1);
        match s.hold(&r).await {
            Ok(HoldOutcome::Created(o)) => orders.push((o, r)),
            Ok(other) => panic!("{other:?}"),
            Err(e) => break e,
        }
        assert!(orders.len() < 10_000, "never refused");
        // The writer looks at free space every 200 ms.
        if orders.len() % 20 == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        }
    };
    let StoreError::ReadOnly(m) = &refused else { panic!("{refused:?}") };
    assert!(m.contains("new holds") && m.contains("payments"), "{m}");
    let before = dump(&*s).await;
    // A replay is still answered from its order; reads are served; payments and cancels go through.
    let (o, r) = &orders[0];
    assert_eq!(s.hold(r).await.unwrap(), HoldOutcome::Replay(o.clone()));
    assert!(s.stock("ev").await.unwrap().is_some());
    let paid = s.pay(&PaymentRequest { order_id: o.order_id.clone(), txn_id: "t1".into(), amount_cents: o.amount_cents }).await.unwrap();
    assert!(matches!(paid, PayOutcome::Paid(_)), "{paid:?}");
    let closed = s.close(&orders[1].0.order_id, CloseReason::Cancelled).await.unwrap();
    assert!(matches!(closed, TransitionOutcome::Done(_)), "{closed:?}");
    assert_ne!(dump(&*s).await, before);
    conformance::assert_invariants(&*s, "ev").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_error_is_refused_and_rolled_back() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    // No reserve, 24 KiB "free": the write that does not fit fails like ENOSPC.
    let opts = DiskOptions { reserve_bytes: 0, snapshot_bytes: 1 << 30, test_free_bytes: Some(24 << 10) };
    let s = open(dir.path(), &clock, opts);
    let now = s.now_ms().await.unwrap();
    s.put_event("ev", &conformance::spec(now, 100_000, 10, 1, &[]), false).await.unwrap();
    // Reads running beside the holds are never refused: one that saw records later rolled back is done
    // again on the rolled-back state.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = tokio::spawn({
        let (s, stop) = (s.clone(), stop.clone());
        async move {
            let mut reads = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let stock = s.stock("ev").await.unwrap_or_else(|e| panic!("read {reads} refused: {e:?}"));
                assert!(stock.is_some());
                reads += 1;
                tokio::task::yield_now().await;
            }
            reads
        }
    });
    // Concurrent holds: the failed frame's records and those queued behind it are all undone.
    let mut acked = Vec::new();
    let mut failed = 0;
    'outer: for round in 0..1000 {
        let mut tasks = Vec::new();
        for c in 0..8 {
            let s = s.clone();
            tasks.push(tokio::spawn(async move {
                let r = conformance::req("ev", &format!("u{round}-{c}"), "park", 1);
                (s.hold(&r).await, r)
            }));
        }
        for t in tasks {
            match t.await.unwrap() {
                (Ok(HoldOutcome::Created(o)), _) => acked.push(o),
                (Ok(other), _) => panic!("{other:?}"),
                (Err(StoreError::ReadOnly(m)), r) => {
                    assert!(m.contains("not acknowledged") || m.contains("cannot be written"), "{m}");
                    // Undone: the order does not exist, its stock is back.
                    assert_eq!(s.get_order(&r.order_id).await.unwrap(), None);
                    failed += 1;
                }
                (Err(e), _) => panic!("{e:?}"),
            }
        }
        if failed > 0 {
            break 'outer;
        }
    }
    assert!(failed > 0, "the disk never filled");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(reader.await.unwrap() > 0);
    // Refused from now on, with nothing written; reads still served.
    let err = s.hold(&conformance::req("ev", "late", "park", 1)).await.unwrap_err();
    assert!(matches!(err, StoreError::ReadOnly(_)), "{err:?}");
    let err = s.set_paused("ev", true).await.unwrap_err();
    assert!(matches!(err, StoreError::ReadOnly(_)), "{err:?}");
    let park = conformance::pool(&*s, "ev", "park").await;
    assert_eq!(park.held, acked.len() as u64, "memory holds exactly the acknowledged holds");
    conformance::assert_invariants(&*s, "ev").await;
    let before = dump(&*s).await;
    drop(s);
    // On disk: exactly what was acknowledged.
    let s = open(dir.path(), &clock, DiskOptions { reserve_bytes: 0, snapshot_bytes: 1 << 30, test_free_bytes: None });
    assert_eq!(dump(&*s).await, before);
    for o in &acked {
        assert_eq!(s.get_order(&o.order_id).await.unwrap().as_ref(), Some(o));
    }
}

/// A fan on the waitlist that stops asking loses its turn after `WAIT_LIVE_MS` (and so does one whose token
/// expired): the tickets it waited for go to the next fan. Asking again in time keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waitlist_turn_lapses_when_its_fan_stops_asking() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let s = open(dir.path(), &clock, small_snapshots());
    let now = s.now_ms().await.unwrap();
    s.put_event("ev", &conformance::spec(now, 1, 1, 1, &[]), false).await.unwrap();
    let a = conformance::created(&*s, &conformance::req("ev", "a", "park", 1)).await;
    let cat = HoldRequest { wait: true, ..conformance::req("ev", "cat", "park", 1) };
    let dan = HoldRequest { wait: true, jti_expires_ms: now + 12_000, ..conformance::req("ev", "dan", "park", 1) };
    let eve = conformance::req("ev", "eve", "park", 1);
    assert_eq!(s.hold(&cat).await.unwrap(), conformance::waits(0, 1, 0));
    assert_eq!(s.hold(&dan).await.unwrap(), conformance::waits(0, 1, 1));
    s.close(&a.order_id, CloseReason::Cancelled).await.unwrap();
    // Cat asked 9 s ago: still its ticket. Dan asks again and keeps its turn.
    clock.advance_ms(9_000);
    assert_eq!(s.hold(&eve).await.unwrap(), conformance::sold_out(0, 1, 2));
    assert_eq!(s.hold(&dan).await.unwrap(), conformance::waits(0, 1, 1));
    // Cat has not asked for over 10 s: its turn lapsed, the ticket is Dan's, not Eve's.
    clock.advance_ms(2_000);
    assert_eq!(s.stock("ev").await.unwrap().unwrap().waiting, 1);
    assert_eq!(s.hold(&eve).await.unwrap(), conformance::sold_out(0, 1, 1));
    // Dan's token expires before it comes back: its turn with it; Eve holds.
    clock.advance_ms(1_500);
    assert_eq!(s.stock("ev").await.unwrap().unwrap().waiting, 0);
    conformance::created(&*s, &eve).await;
}

/// A pause longer than a turn's 10 s keeps the turns of the fans who go on asking (a paused event answers
/// `Paused` before the waitlist is read; the ask still counts), and does not bring back one that had lapsed.
#[tokio::test]
async fn a_waitlist_turn_is_kept_through_a_pause_while_its_fan_asks() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let s = open(dir.path(), &clock, small_snapshots());
    let now = s.now_ms().await.unwrap();
    s.put_event("ev", &conformance::spec(now, 1, 1, 1, &[]), false).await.unwrap();
    let a = conformance::created(&*s, &conformance::req("ev", "a", "park", 1)).await;
    let cat = HoldRequest { wait: true, ..conformance::req("ev", "cat", "park", 1) };
    let dan = HoldRequest { wait: true, ..conformance::req("ev", "dan", "park", 1) };
    let eve = HoldRequest { wait: true, ..conformance::req("ev", "eve", "park", 1) };
    assert_eq!(s.hold(&dan).await.unwrap(), conformance::waits(0, 1, 0));
    assert_eq!(s.hold(&cat).await.unwrap(), conformance::waits(0, 1, 1));
    // Paused for 20 s: Cat asks every 9 s, Dan does not ask.
    assert!(s.set_paused("ev", true).await.unwrap());
    for _ in 0..2 {
        clock.advance_ms(9_000);
        assert_eq!(s.hold(&cat).await.unwrap(), HoldOutcome::Paused);
    }
    // Dan asks at 18 s, its turn lapsed at 10 s; a fan that never waited asks: neither is put on the list.
    assert_eq!(s.hold(&dan).await.unwrap(), HoldOutcome::Paused);
    assert_eq!(s.hold(&eve).await.unwrap(), HoldOutcome::Paused);
    clock.advance_ms(2_000);
    assert!(s.set_paused("ev", false).await.unwrap());
    s.close(&a.order_id, CloseReason::Cancelled).await.unwrap();
    // Eve asks first after the pause: the ticket is Cat's (Dan's turn lapsed at 10 s, and asking while
    // paused did not bring it back: Dan joins behind Cat and Eve).
    assert_eq!(s.hold(&eve).await.unwrap(), conformance::waits(0, 1, 1));
    assert_eq!(s.hold(&dan).await.unwrap(), conformance::waits(0, 1, 2));
    conformance::created(&*s, &cat).await;
}
