//! The conformance suite on the embedded store, with a manual clock.

mod conformance;

use std::sync::Arc;

use wicket_core::clock::ManualClock;
use wicket_core::store::DynStore;
use wicket_core::store::embedded::EmbeddedStore;

struct Embedded {
    store: DynStore,
    clock: Arc<ManualClock>,
}

#[async_trait::async_trait]
impl conformance::Harness for Embedded {
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

async fn embedded() -> Embedded {
    // 2026-12-01T03:00:00Z: an hour into the example sale.
    let clock = Arc::new(ManualClock::new(1_764_558_000_000));
    Embedded { store: Arc::new(EmbeddedStore::with_clock(clock.clone())), clock }
}

conformance_suite!(embedded);
