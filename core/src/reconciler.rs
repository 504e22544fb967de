//! The reconciler: per pool, capacity = available + held + sold, and the pool counters agree with the orders
//! (deducted ≥ orders ≥ paid). A mismatch raises `wicket_core_reconcile_ok{event} 0`, counts a failure and,
//! unless configured otherwise, pauses the event so no more stock moves until an operator looks. Each pass
//! also sets `wicket_core_event_paused{event}` from the event's record (operator pauses included).

use crate::Core;
use crate::model::ReconcileReport;

impl Core {
    /// Reconciles every event once; returns the reports of those that failed.
    pub async fn reconcile_once(&self) -> Vec<(String, ReconcileReport)> {
        let store = &self.state.store;
        let mut failed = Vec::new();
        let Ok(events) = store.list_events().await else { return failed };
        for event in events {
            let rep = match store.reconcile(&event).await {
                Ok(Some(r)) => r,
                Ok(None) => continue,
                Err(e) => {
                    tracing::warn!(event, error = %e, "reconciler: store unavailable");
                    continue;
                }
            };
            self.state.metrics.reconcile_ok.with_label_values(&[event.as_str()]).set(rep.ok as i64);
            if !rep.ok {
                self.state.metrics.reconcile_failures.with_label_values(&[event.as_str()]).inc();
                let bad: Vec<&str> = rep.checks.iter().filter(|c| !c.ok).map(|c| c.detail.as_str()).collect();
                tracing::error!(event, ?bad, "reconciliation failed");
                if self.tuning.pause_on_mismatch {
                    match store.set_paused(&event, true).await {
                        Ok(_) => tracing::error!(event, "event paused after a reconciliation mismatch"),
                        Err(e) => tracing::error!(event, error = %e, "could not pause the event"),
                    }
                }
            }
            if let Ok(Some(record)) = store.get_event(&event).await {
                self.state.metrics.event_paused.with_label_values(&[event.as_str()]).set(i64::from(record.paused));
            }
            if !rep.ok {
                failed.push((event, rep));
            }
        }
        failed
    }
}
