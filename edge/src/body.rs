//! Reading the body of a request the edge answers itself, within `max-body-bytes` and the
//! client-side deadlines ([`Timeouts`]; config keys in [`crate::config::EdgeConfig`]).

use std::time::{Duration, Instant};

use bytes::Bytes;
use pingora::ErrorType;
use pingora::proxy::Session;

use crate::identity::header as header_str;
use crate::reject::Reject;

/// Deadlines on the client side of the edge (config keys in [`crate::config::EdgeConfig`]).
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// The whole request head, from its first byte (`header-timeout-ms`).
    pub header: Duration,
    /// Longest pause in a request body (`body-timeout-ms`); also the grace before the rate floor.
    pub body: Duration,
    /// Slowest average body rate, bytes/s, 0 = off (`body-min-rate`).
    pub body_min_rate: u64,
    /// One write to a client (`client-write-timeout-ms`).
    pub client_write: Duration,
}

impl Timeouts {
    /// True when a body that has brought `bytes` in `elapsed` since its head is too slow.
    pub fn body_too_slow(&self, bytes: u64, elapsed: Duration) -> bool {
        self.body_min_rate > 0 && elapsed > self.body && (bytes as f64) < self.body_min_rate as f64 * elapsed.as_secs_f64()
    }
}

/// Reads a request body the edge answers itself: a declared length over `max-body-bytes` is
/// refused before a byte is read (413), a longer body as soon as it passes the cap, a body that
/// stalls longer than `body-timeout-ms` or arrives below `body-min-rate` with 408.
pub async fn read(session: &mut Session, max: usize, timeouts: &Timeouts) -> Result<Bytes, Reject> {
    let declared = header_str(session.req_header(), "content-length").map(|v| v.parse::<u64>());
    match declared {
        Some(Ok(n)) if n > max as u64 => return Err(Reject::PayloadTooLarge),
        Some(Err(_)) => return Err(Reject::BadRequest("Content-Length must be a number")),
        _ => {}
    }
    let started = Instant::now();
    let mut buf = Vec::new();
    loop {
        match session.read_request_body().await {
            Ok(Some(chunk)) => {
                if buf.len() + chunk.len() > max {
                    return Err(Reject::PayloadTooLarge);
                }
                buf.extend_from_slice(&chunk);
                if timeouts.body_too_slow(buf.len() as u64, started.elapsed()) {
                    return Err(Reject::RequestTimeout);
                }
            }
            Ok(None) => return Ok(Bytes::from(buf)),
            Err(e) if e.etype() == &ErrorType::ReadTimedout => return Err(Reject::RequestTimeout),
            Err(_) => return Err(Reject::BadRequest("could not read the request body")),
        }
    }
}
