//! The answers every admin-port handler shares — a JSON body, an `{error, message}` refusal — and the
//! constant-time token comparison. Its own file so that [`crate::admin`] (the router), [`crate::console`]
//! (sessions) and [`crate::room::admin`] (the rooms' routes) use them without importing each other.

use http::Response;
use serde_json::json;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// A JSON answer of the admin port (rooms use it too).
pub fn json_response(status: u16, v: &serde_json::Value) -> Response<Vec<u8>> {
    let body = v.to_string().into_bytes();
    Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::CONTENT_LENGTH, body.len())
        .header(http::header::CACHE_CONTROL, "no-store")
        .body(body)
        .unwrap_or_else(|_| Response::new(Vec::new()))
}

/// An `{error, message}` answer of the admin port.
pub fn error(status: u16, code: &str, message: impl Into<String>) -> Response<Vec<u8>> {
    json_response(status, &json!({"error": code, "message": message.into()}))
}

/// Constant-time comparison of the presented token with the configured one (hashing first so
/// not even the length leaks).
pub fn token_matches(presented: &str, expected: &str) -> bool {
    let a = Sha256::digest(presented.as_bytes());
    let b = Sha256::digest(expected.as_bytes());
    bool::from(a.ct_eq(&b))
}
