//! Wicket's sale core.
//!
//! # Layout
//! - [`model`]: events, pools, SKUs, limits, orders and the typed outcomes of every store operation.
//! - [`clock`]: the time source (system, or manual in tests).
//! - [`store`]: the [`store::SaleStore`] trait and its embedded and Redis implementations.

pub mod clock;
pub mod model;
pub mod store;
