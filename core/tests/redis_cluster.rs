//! The conformance suite on a 3-master Redis Cluster on loopback (tests/common), one cluster per test.
//! Every key of an event shares the `{ev:<id>}` hash tag, so each script runs on the event's master.
//!
//! `cargo nextest run -p wicket-core --test redis_cluster`

mod common;
mod conformance;

use std::sync::Arc;
use std::time::Duration;

use common::RedisCluster;
use wicket_core::store::DynStore;
use wicket_core::store::redis::RedisStore;

struct Cluster {
    store: DynStore,
    _cluster: RedisCluster,
}

#[async_trait::async_trait]
impl conformance::Harness for Cluster {
    fn store(&self) -> DynStore {
        self.store.clone()
    }
    async fn advance_ms(&self, ms: i64) {
        tokio::time::sleep(Duration::from_millis(ms.max(0) as u64)).await;
    }
    fn cheap_time(&self) -> bool {
        false
    }
}

async fn cluster() -> Cluster {
    let cluster = RedisCluster::start(3);
    let store = RedisStore::connect_cluster(&cluster.seeds()).await.expect("connect to the test cluster");
    Cluster { store: Arc::new(store), _cluster: cluster }
}

conformance_suite!(cluster);

/// Events land on different masters, and each still works: the slot of each event's keys is one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn events_spread_over_masters() {
    let h = cluster().await;
    let mut ports = std::collections::HashSet::new();
    for i in 0..12 {
        let id = conformance::new_event(&h, &format!("spread{i}"), 10, 5, 3, &[]).await;
        let r = conformance::req(&id, "u1", "park+zoo", 2);
        conformance::created(&*h.store, &r).await;
        conformance::assert_invariants(&*h.store, &id).await;
        for n in &h._cluster.nodes {
            let key = format!("wk:{{ev:{id}}}:ev");
            if n.cli(&["exists", &key]).trim() == "1" {
                ports.insert(n.port());
            }
        }
    }
    assert!(ports.len() >= 2, "12 events all on one master");
}

/// SCRIPT FLUSH on every master: the next calls reload the scripts (SCRIPT LOAD goes to every node) and run.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn script_flush_on_every_master_is_survived() {
    let h = cluster().await;
    let mut ids = Vec::new();
    for i in 0..6 {
        ids.push(conformance::new_event(&h, &format!("flush{i}"), 10, 5, 3, &[]).await);
    }
    for n in &h._cluster.nodes {
        assert_eq!(n.cli(&["SCRIPT", "FLUSH"]).trim(), "OK");
    }
    for id in &ids {
        let r = conformance::req(id, "u1", "park", 1);
        conformance::created(&*h.store, &r).await;
        assert_eq!(conformance::pool(&*h.store, id, "park").await.held, 1);
        conformance::assert_invariants(&*h.store, id).await;
    }
}
