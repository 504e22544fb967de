//! The conformance suite on a 3-master Redis Cluster on loopback (wicket-testkit), one cluster per test.
//! Every key of an event shares the `{ev:<id>}` hash tag, so each script runs on the event's master.
//!
//! `cargo nextest run -p wicket-core --test redis_cluster`

mod conformance;

use std::sync::Arc;

use conformance::OnRedis;
use wicket_core::store::redis::RedisStore;
use wicket_testkit::RedisCluster;

async fn cluster() -> OnRedis<RedisCluster> {
    let cluster = RedisCluster::start(3);
    let store = RedisStore::connect_cluster(&cluster.seeds()).await.expect("connect to the test cluster");
    OnRedis { store: Arc::new(store), servers: cluster }
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
        for n in &h.servers.nodes {
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
    for n in &h.servers.nodes {
        assert_eq!(n.cli(&["SCRIPT", "FLUSH"]).trim(), "OK");
    }
    for id in &ids {
        let r = conformance::req(id, "u1", "park", 1);
        conformance::created(&*h.store, &r).await;
        assert_eq!(conformance::pool(&*h.store, id, "park").await.held, 1);
        conformance::assert_invariants(&*h.store, id).await;
    }
}
