//! The sweeper: closes holds past their deadline and gives their tickets back — unless the payment provider
//! says the order was paid (a lost callback must not cost a paid seat), in which case it pays it instead.
//!
//! Several core instances may run it: a store lease lets one work at a time, and every transition is a
//! compare-and-set, so a double run is harmless anyway.

use futures::StreamExt;

use crate::Core;
use crate::model::{CloseReason, PayOutcome, PaymentRequest, TransitionOutcome};
use crate::payment::{PaymentQuery, QueryStatus};

/// Most expired holds looked at per event per pass.
const BATCH: usize = 500;
/// Payment queries in flight at once (the sweeper's, and the re-check's).
pub(crate) const QUERY_CONCURRENCY: usize = 16;

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SweepReport {
    /// Expired holds closed, tickets back on sale.
    pub closed: usize,
    /// Expired holds the provider said were paid: paid instead of closed.
    pub paid: usize,
    /// Expired holds kept because the provider's answer is unknown (within the grace period).
    pub kept: usize,
    /// Holds someone else moved first (a callback, another instance).
    pub raced: usize,
}

enum Action {
    Closed,
    Paid,
    Kept,
    Raced,
}

/// What asking the provider about a CREATED order led to. Shared by the sweeper (before it closes an expired
/// hold) and the re-check after a Redis restart ([`crate::recheck`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Asked {
    /// The provider says paid, and the order is now PAID (the callback's compare-and-set transition).
    Paid,
    /// The provider says not paid (`NOTPAY` / `CLOSED`): the order is left as it is.
    NotPaid,
    /// No usable answer (timeout, error, garbage): the order is left as it is.
    Unknown(String),
    /// The provider says paid, but someone moved the order first (a callback, a close, another instance).
    Moved,
    /// The provider says paid, but the order could not take it now (another amount, or the store failed):
    /// left CREATED, to be asked again.
    Failed,
}

impl Core {
    /// Asks the provider about `order` and, when it says paid, pays the order exactly as a callback would
    /// (idempotent by txn id). `who` names the caller in logs.
    pub(crate) async fn ask_and_pay(&self, q: &PaymentQuery, order: &str, who: &'static str) -> Asked {
        let (txn_id, amount_cents) = match q.status(order).await {
            QueryStatus::Paid { txn_id, amount_cents } => (txn_id, amount_cents),
            QueryStatus::NotPaid => return Asked::NotPaid,
            QueryStatus::Unknown(why) => return Asked::Unknown(why),
        };
        let req = PaymentRequest { order_id: order.to_string(), txn_id, amount_cents };
        match self.state.store.pay(&req).await {
            Ok(PayOutcome::Paid(_)) => {
                tracing::info!(order, who, "provider says paid; order paid");
                self.state.metrics.transitions.with_label_values(&["PAID"]).inc();
                self.state.metrics.payments.with_label_values(&["paid_by_query"]).inc();
                Asked::Paid
            }
            Ok(PayOutcome::AmountMismatch { expected }) => {
                tracing::error!(order, who, expected, amount_cents, "provider reports another amount; kept for an operator");
                Asked::Failed
            }
            Ok(_) => Asked::Moved,
            Err(e) => {
                tracing::warn!(order, who, error = %e, "pay after a status query failed; will retry");
                Asked::Failed
            }
        }
    }

    /// One sweeper pass over every event. Holds the lease for `ttl_ms`; returns an empty report without it.
    pub async fn sweep_once(&self) -> SweepReport {
        let mut report = SweepReport::default();
        let store = &self.state.store;
        let ttl = self.tuning.sweeper_period_ms.saturating_mul(5).max(1000);
        match store.try_lease("sweeper", &self.instance, ttl).await {
            Ok(true) => {}
            Ok(false) => return report,
            Err(e) => {
                tracing::warn!(error = %e, "sweeper: lease unavailable");
                return report;
            }
        }
        let events = match store.list_events().await {
            Ok(ev) => ev,
            Err(e) => {
                tracing::warn!(error = %e, "sweeper: cannot list events");
                return report;
            }
        };
        let now = store.now_ms().await.unwrap_or(0);
        for event in events {
            let due = match store.due_holds(&event, BATCH).await {
                Ok(d) => d,
                Err(e) => {
                    tracing::warn!(event, error = %e, "sweeper: cannot read due holds");
                    continue;
                }
            };
            let actions: Vec<Action> = futures::stream::iter(due)
                .map(|(order, deadline)| self.settle(order, deadline, now))
                .buffer_unordered(QUERY_CONCURRENCY)
                .collect()
                .await;
            let mut closed_any = false;
            for a in actions {
                match a {
                    Action::Closed => {
                        report.closed += 1;
                        closed_any = true;
                    }
                    Action::Paid => report.paid += 1,
                    Action::Kept => report.kept += 1,
                    Action::Raced => report.raced += 1,
                }
            }
            if closed_any {
                self.state.clear_sold_out(&event);
            }
        }
        let m = &self.state.metrics.sweeper;
        m.with_label_values(&["closed"]).inc_by(report.closed as u64);
        m.with_label_values(&["paid"]).inc_by(report.paid as u64);
        m.with_label_values(&["kept"]).inc_by(report.kept as u64);
        m.with_label_values(&["raced"]).inc_by(report.raced as u64);
        report
    }

    async fn settle(&self, order: String, deadline: i64, now: i64) -> Action {
        let store = &self.state.store;
        if let Some(q) = &self.query {
            match self.ask_and_pay(q, &order, "sweeper").await {
                Asked::Paid => return Action::Paid,
                Asked::Moved => return Action::Raced,
                Asked::Failed => return Action::Kept,
                Asked::NotPaid => {}
                Asked::Unknown(why) => {
                    if now < deadline + self.grace_ms {
                        tracing::debug!(order, why, "sweeper: payment status unknown; hold kept");
                        return Action::Kept;
                    }
                    tracing::warn!(order, why, "sweeper: payment status still unknown past the grace period; closing");
                }
            }
        }
        match store.close(&order, CloseReason::Expired).await {
            Ok(TransitionOutcome::Done(_)) => {
                self.state.metrics.transitions.with_label_values(&["CLOSED"]).inc();
                Action::Closed
            }
            Ok(_) => Action::Raced,
            Err(e) => {
                tracing::warn!(order, error = %e, "sweeper: close failed; will retry");
                Action::Kept
            }
        }
    }
}
