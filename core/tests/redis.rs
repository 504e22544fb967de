//! The conformance suite on the Redis store: a fresh `redis-server` per test (tests/common), real time.
//!
//! `cargo nextest run -p wicket-core --test redis`

mod common;
mod conformance;

use std::sync::Arc;
use std::time::Duration;

use common::RedisServer;
use wicket_core::store::DynStore;
use wicket_core::store::redis::RedisStore;

struct Redis {
    store: DynStore,
    _server: RedisServer,
}

#[async_trait::async_trait]
impl conformance::Harness for Redis {
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

async fn redis() -> Redis {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url()).await.expect("connect to the test redis");
    Redis { store: Arc::new(store), _server: server }
}

conformance_suite!(redis);
