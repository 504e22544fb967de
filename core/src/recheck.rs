//! The re-check after a Redis restart (DESIGN §6): before the sale reopens, every CREATED order is checked
//! with the payment provider, so money taken while callbacks could not land is booked first.
//!
//! - **Detect.** Every [`WATCH_PERIOD`] the core reads [`SaleStore::server_ids`](crate::store::SaleStore::server_ids):
//!   the `run_id` of the Redis (INFO server), or of every master of a Cluster. A run id seen last time that is
//!   gone now is a restart: a restarted process (an AOF reload keeps the data, never the run id) or a
//!   failed-over master. A master added by a scale-out is not one; a master removed counts (a harmless
//!   extra re-check). Counted in `wicket_core_redis_restarts_total`.
//! - **At start.** A core starting on an existing Redis has seen no restart, and none is counted, but it
//!   cannot know what happened while it was not running: its first check runs a re-check too
//!   (`wicket_core_recheck_runs_total{reason="startup"}`), and [`Core::spawn_background`] refuses holds from
//!   before the API serves until that first pass is done. A re-check with nothing CREATED takes one
//!   round trip per event.
//! - **Refuse holds, serve the rest.** While a pass runs, holds of every event get 403 `event_paused` with
//!   `Retry-After` (before the store is asked, so the admission token stays unused), `GET /v1/events/{event}`
//!   says `paused`, and `wicket_core_rechecking` is 1. Payment callbacks, orders, cancels and operator calls
//!   are served throughout: a paid order is never refused.
//! - **Pass.** For each event, for each CREATED order (the store's `created_orders`, a ZSCAN of the
//!   deadlines on Redis), the sweeper's own query ([`Core::ask_and_pay`]): paid → PAID by the callback's
//!   compare-and-set transition (idempotent); not paid → left CREATED (the sweeper closes it at its
//!   deadline); unknown or unreachable → left CREATED and counted. Each order once, in
//!   `wicket_core_recheck_orders_total{result}`. Then holds reopen. A store error ends the pass early: holds
//!   stay refused and the next tick starts the pass over (orders already paid are no longer CREATED).
//!
//! Limits: a restart that completes within one [`WATCH_PERIOD`] can let a few holds in before the pass
//! starts (they are ordinary holds, and the pass checks them too). Each core instance watches and re-checks
//! on its own, so with n instances the provider is asked up to n times per order.
//!
//! **Durable embedded store.** Its state is this process's own: nothing to watch. But a process that
//! crashed or stopped missed every callback meanwhile, so after the state is rebuilt from disk the same pass
//! runs once ([`Core::recheck_at_start`], reason `startup`), with holds refused until it is done.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use crate::Core;
use crate::store::{ServerId, StoreError};
use crate::sweeper::{Asked, QUERY_CONCURRENCY};

/// How often the core reads the Redis run ids. INFO server is one cheap round trip (per master).
pub const WATCH_PERIOD: Duration = Duration::from_millis(200);
/// CREATED orders read per store call during a pass.
const PAGE: usize = 500;

/// What one pass found, order by order.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RecheckReport {
    /// The provider said paid: now PAID.
    pub paid: usize,
    /// The provider said not paid: left CREATED for the sweeper.
    pub not_paid: usize,
    /// No usable answer (timeout, error, garbage): left CREATED.
    pub unknown: usize,
    /// Paid, but a callback, a cancel or another instance moved the order first.
    pub moved: usize,
    /// Paid, but the order could not take it (another amount, or the store failed): left CREATED.
    pub failed: usize,
}

/// What one check of the store's servers did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchOutcome {
    /// The store lives in this process: nothing to watch.
    NotApplicable,
    /// The same servers as last time, and no pass owed.
    Unchanged,
    /// The servers could not be read; the next tick tries again (holds are not refused for this: they
    /// fail on their own while the store is down).
    Unreachable(String),
    /// A pass ran to its end and holds are accepted again. `reason`: `startup` or `restart`.
    Rechecked { reason: &'static str, report: RecheckReport },
    /// A pass stopped on a store error: holds stay refused, the next tick starts it over.
    Incomplete(String),
}

/// Whether `now` lacks a run id of `prev`: a server restarted (or a master was replaced).
fn restarted(prev: &[ServerId], now: &[ServerId]) -> bool {
    prev.iter().any(|p| !now.iter().any(|n| n.run_id == p.run_id))
}

impl Core {
    /// Refuses holds until the first pass is done, and checks the store's servers every [`WATCH_PERIOD`]
    /// until `stop` fires (an external store only: [`Core::spawn_background`]).
    pub(crate) fn spawn_restart_watcher(self: &Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        self.state.set_rechecking(true);
        let core = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(WATCH_PERIOD);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                // A shutdown also ends a pass in progress: every step of it is a compare-and-set.
                tokio::select! {
                    _ = async { tick.tick().await; core.watch_store_once().await } => {}
                    _ = stop.changed() => break,
                }
            }
        });
    }

    /// One check of the store's servers, and the re-check pass when one is owed (the first check since
    /// start, or a restart). The background watcher calls it every [`WATCH_PERIOD`].
    pub async fn watch_store_once(&self) -> WatchOutcome {
        let store = &self.state.store;
        if !store.is_external() {
            return WatchOutcome::NotApplicable;
        }
        let mut w = self.watch.lock().await;
        let ids = match store.server_ids().await {
            Ok(ids) => ids,
            Err(e) => {
                tracing::debug!(error = %e, "cannot read the Redis run ids; will retry");
                return WatchOutcome::Unreachable(e.to_string());
            }
        };
        match &w.seen {
            None => {
                w.pending.get_or_insert("startup");
            }
            Some(prev) if restarted(prev, &ids) => {
                self.state.metrics.redis_restarts.inc();
                tracing::warn!(before = ?prev, now = ?ids, "the sale's Redis restarted: holds paused until CREATED orders are re-checked");
                w.pending = Some("restart");
            }
            Some(prev) if *prev != ids => {
                tracing::info!(before = ?prev, now = ?ids, "Redis masters changed without a restart");
            }
            Some(_) => {}
        }
        w.seen = Some(ids);
        let Some(reason) = w.pending else { return WatchOutcome::Unchanged };
        self.state.set_rechecking(true);
        match self.recheck_created().await {
            Ok(report) => {
                w.pending = None;
                self.state.set_rechecking(false);
                self.state.metrics.recheck_runs.with_label_values(&[reason]).inc();
                if report.unknown + report.failed > 0 {
                    tracing::warn!(reason, ?report, "re-check done; some CREATED orders have no answer yet (the sweeper asks again before closing them); holds reopened");
                } else {
                    tracing::info!(reason, ?report, "re-check of CREATED orders done; holds reopened");
                }
                WatchOutcome::Rechecked { reason, report }
            }
            Err(e) => {
                tracing::warn!(reason, error = %e, "re-check of CREATED orders interrupted; holds stay paused, starting over");
                WatchOutcome::Incomplete(e.to_string())
            }
        }
    }

    /// The start-up pass of the durable embedded store: holds stay refused (set by
    /// [`Core::spawn_background`]) until a pass over every CREATED order completes; a store error starts it
    /// over after [`WATCH_PERIOD`].
    pub async fn recheck_at_start(&self) -> RecheckReport {
        self.state.set_rechecking(true);
        loop {
            match self.recheck_created().await {
                Ok(report) => {
                    self.state.set_rechecking(false);
                    self.state.metrics.recheck_runs.with_label_values(&["startup"]).inc();
                    tracing::info!(?report, "start-up re-check of CREATED orders done; holds open");
                    return report;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "start-up re-check of CREATED orders interrupted; starting over");
                    tokio::time::sleep(WATCH_PERIOD).await;
                }
            }
        }
    }

    /// Asks the provider about every CREATED order of every event, paying those it says are paid.
    async fn recheck_created(&self) -> Result<RecheckReport, StoreError> {
        let mut report = RecheckReport::default();
        let Some(q) = &self.query else {
            tracing::warn!("no payment.query-url: CREATED orders cannot be re-checked with the provider");
            return Ok(report);
        };
        let store = &self.state.store;
        let orders = &self.state.metrics.recheck_orders;
        for event in store.list_events().await? {
            let mut seen = HashSet::new();
            let mut cursor: Option<String> = None;
            loop {
                let (page, next) = store.created_orders(&event, cursor.as_deref(), PAGE).await?;
                // A scan may return an order twice: ask once.
                let fresh: Vec<String> = page.into_iter().map(|(id, _)| id).filter(|id| seen.insert(id.clone())).collect();
                let answers: Vec<Asked> = futures::stream::iter(fresh)
                    .map(|id| async move { self.ask_and_pay(q, &id, "recheck").await })
                    .buffer_unordered(QUERY_CONCURRENCY)
                    .collect()
                    .await;
                for a in answers {
                    let (slot, label) = match a {
                        Asked::Paid => (&mut report.paid, "paid"),
                        Asked::NotPaid => (&mut report.not_paid, "not_paid"),
                        Asked::Unknown(_) => (&mut report.unknown, "unknown"),
                        Asked::Moved => (&mut report.moved, "moved"),
                        Asked::Failed => (&mut report.failed, "failed"),
                    };
                    *slot += 1;
                    orders.with_label_values(&[label]).inc();
                }
                match next {
                    Some(c) => cursor = Some(c),
                    None => break,
                }
            }
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(node: &str, run: &str) -> ServerId {
        ServerId { node: node.into(), run_id: run.into() }
    }

    #[test]
    fn a_missing_run_id_is_a_restart() {
        let a = vec![id("n1", "r1"), id("n2", "r2")];
        assert!(!restarted(&a, &a));
        assert!(restarted(&a, &[id("n1", "r1"), id("n2", "r9")]), "a restarted master");
        assert!(restarted(&a, &[id("n1", "r1"), id("n3", "r3")]), "a failover to another node");
        assert!(!restarted(&a, &[id("n1", "r1"), id("n2", "r2"), id("n3", "r3")]), "a master added");
        assert!(restarted(&[id("p", "r1")], &[id("p", "r2")]), "one Redis, restarted");
    }
}
