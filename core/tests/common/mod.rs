//! The one test helper of the core's integration tests: a real core on a loopback port ([`core_server`]).
//! Real `redis-server`s and Redis Clusters come from the `wicket-testkit` crate, shared with the edge's tests.

#![allow(dead_code)]

pub mod core_server;
