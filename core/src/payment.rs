//! Payment provider plumbing: verifying signed callbacks, and asking the provider about an order when a
//! callback may have been lost.

use std::time::Duration;

use bytes::Bytes;
use hmac::{Hmac, Mac};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::Deserialize;
use sha2::Sha256;

/// Why a callback signature was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("missing Wicket-Signature header")]
    Missing,
    #[error("malformed Wicket-Signature header (want t=<unix seconds>,v1=<hex>)")]
    Malformed,
    #[error("signature timestamp too far from now")]
    Stale,
    #[error("signature does not match")]
    Mismatch,
}

/// Checks `Wicket-Signature: t=<unix>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>` in constant time.
pub fn verify_signature(header: Option<&str>, body: &[u8], secret: &[u8], now: i64, tolerance: u64) -> Result<(), SignatureError> {
    let header = header.ok_or(SignatureError::Missing)?;
    let (mut t, mut sigs) = (None, Vec::new());
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", v)) => t = Some(v.parse::<i64>().map_err(|_| SignatureError::Malformed)?),
            Some(("v1", v)) => sigs.push(hex::decode(v).map_err(|_| SignatureError::Malformed)?),
            Some(_) => {}
            None => return Err(SignatureError::Malformed),
        }
    }
    let t = t.ok_or(SignatureError::Malformed)?;
    if sigs.is_empty() {
        return Err(SignatureError::Malformed);
    }
    if now.abs_diff(t) > tolerance {
        return Err(SignatureError::Stale);
    }
    for sig in sigs {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret).map_err(|_| SignatureError::Mismatch)?;
        mac.update(t.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        if mac.verify_slice(&sig).is_ok() {
            return Ok(());
        }
    }
    Err(SignatureError::Mismatch)
}

/// Builds a `Wicket-Signature` value (for providers' adapters and tests).
pub fn sign(body: &[u8], secret: &[u8], t: i64) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("t={t},v1={}", hex::encode(mac.finalize().into_bytes()))
}

/// What the provider says about an order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueryStatus {
    Paid { txn_id: String, amount_cents: u64 },
    NotPaid,
    /// Timeout, error, or an answer we cannot read: keep the hold and ask again later.
    Unknown(String),
}

#[derive(Deserialize)]
struct QueryAnswer {
    order_id: String,
    status: String,
    #[serde(default)]
    txn_id: Option<String>,
    #[serde(default)]
    amount_cents: Option<u64>,
}

/// Asks `GET <query-url>?order_id=<id>` (docs/src/api.md "Payment status query").
#[derive(Clone)]
pub struct PaymentQuery {
    url: url::Url,
    timeout: Duration,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl PaymentQuery {
    pub fn new(url: &str, timeout: Duration) -> anyhow::Result<PaymentQuery> {
        let url = url::Url::parse(url)?;
        let mut conn = HttpConnector::new();
        conn.set_connect_timeout(Some(timeout));
        let client = Client::builder(TokioExecutor::new()).pool_idle_timeout(Duration::from_secs(30)).build(conn);
        Ok(PaymentQuery { url, timeout, client })
    }

    pub async fn status(&self, order_id: &str) -> QueryStatus {
        let mut url = self.url.clone();
        url.query_pairs_mut().append_pair("order_id", order_id);
        let req = match http::Request::get(url.as_str()).body(Full::new(Bytes::new())) {
            Ok(r) => r,
            Err(e) => return QueryStatus::Unknown(e.to_string()),
        };
        let fut = async {
            let resp = self.client.request(req).await.map_err(|e| e.to_string())?;
            if resp.status() != http::StatusCode::OK {
                return Err(format!("status {}", resp.status()));
            }
            let body = Limited::new(resp.into_body(), 64 * 1024).collect().await.map_err(|e| e.to_string())?.to_bytes();
            crate::strict_json::object_from_slice::<QueryAnswer>(&body).map_err(|e| e.to_string())
        };
        match tokio::time::timeout(self.timeout, fut).await {
            Err(_) => QueryStatus::Unknown("timeout".into()),
            Ok(Err(e)) => QueryStatus::Unknown(e),
            Ok(Ok(a)) if a.order_id != order_id => QueryStatus::Unknown("answer for another order".into()),
            Ok(Ok(a)) => match (a.status.as_str(), a.txn_id, a.amount_cents) {
                ("SUCCESS", Some(txn_id), Some(amount_cents)) => QueryStatus::Paid { txn_id, amount_cents },
                ("SUCCESS", _, _) => QueryStatus::Unknown("SUCCESS without txn_id and amount_cents".into()),
                ("NOTPAY" | "CLOSED", _, _) => QueryStatus::NotPaid,
                (other, _, _) => QueryStatus::Unknown(format!("status {other}")),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures() {
        let body = br#"{"order_id":"x"}"#;
        let h = sign(body, b"secret", 1000);
        assert_eq!(verify_signature(Some(&h), body, b"secret", 1100, 300), Ok(()));
        assert_eq!(verify_signature(Some(&h), body, b"other", 1100, 300), Err(SignatureError::Mismatch));
        assert_eq!(verify_signature(Some(&h), b"{}", b"secret", 1100, 300), Err(SignatureError::Mismatch));
        assert_eq!(verify_signature(Some(&h), body, b"secret", 1400, 300), Err(SignatureError::Stale));
        assert_eq!(verify_signature(None, body, b"secret", 1000, 300), Err(SignatureError::Missing));
        assert_eq!(verify_signature(Some("t=abc,v1=00"), body, b"secret", 1000, 300), Err(SignatureError::Malformed));
        assert_eq!(verify_signature(Some("t=1000"), body, b"secret", 1000, 300), Err(SignatureError::Malformed));
    }
}
