//! The core's HTTP API (docs/src/api.md "Core"): one axum router, one error type, JSON everywhere.
//!
//! Request path: [`guard`] (in-flight limit → quick 503, latency histogram by route) → handler (read body
//! with a 64 KiB cap, parse strictly, authenticate) → one store call → outcome mapped to status + JSON.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{MatchedPath, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use parking_lot::RwLock;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use subtle::ConstantTimeEq;

use crate::metrics::CoreMetrics;
use crate::model::{
    FieldError,
    CloseReason, EventRecord, EventSpec, HoldOutcome, HoldRequest, Identity, Order, PayOutcome, PaymentRequest,
    PutEventOutcome, TransitionOutcome, event_of_order, new_order_id, rfc3339_ms, valid_event_id, valid_id,
};
use crate::payment::verify_signature;
use crate::store::{DynStore, StoreError};
use crate::strict_json;
use crate::token::{AdmissionClaims, Keyring};

/// Largest request body accepted.
pub const MAX_BODY: usize = 64 * 1024;
/// How long a sold-out answer is trusted without asking the store again.
const SOLD_OUT_TTL: Duration = Duration::from_millis(500);

/// What every handler shares.
pub struct AppState {
    pub store: DynStore,
    pub keys: Keyring,
    pub admin_token: String,
    pub callback_secret: String,
    pub signature_tolerance: u64,
    pub metrics: CoreMetrics,
    pub max_inflight: usize,
    inflight: AtomicUsize,
    /// (event, sku) → until when it is known sold out. Answers 409 without touching the store.
    sold_out: RwLock<HashMap<(String, String), Instant>>,
    /// Set while CREATED orders are re-checked with the payment provider (at start, after a Redis restart):
    /// holds are refused with 403 `event_paused`; everything else, payment callbacks first, is served.
    rechecking: AtomicBool,
}

impl AppState {
    pub fn new(store: DynStore, keys: Keyring, admin_token: String, callback_secret: String, metrics: CoreMetrics) -> AppState {
        AppState {
            store,
            keys,
            admin_token,
            callback_secret,
            signature_tolerance: 300,
            metrics,
            max_inflight: 4096,
            inflight: AtomicUsize::new(0),
            sold_out: RwLock::new(HashMap::new()),
            rechecking: AtomicBool::new(false),
        }
    }

    /// Refuses (`true`) or accepts again (`false`) holds of every event while a re-check runs.
    pub fn set_rechecking(&self, on: bool) {
        self.rechecking.store(on, Ordering::SeqCst);
        self.metrics.rechecking.set(on as i64);
    }

    /// Whether holds are refused for a re-check of CREATED orders.
    pub fn is_rechecking(&self) -> bool {
        self.rechecking.load(Ordering::SeqCst)
    }

    fn is_sold_out(&self, event: &str, sku: &str) -> bool {
        let map = self.sold_out.read();
        if map.is_empty() {
            return false;
        }
        map.get(&(event.to_string(), sku.to_string())).is_some_and(|until| *until > Instant::now())
    }

    /// Forgets sold-out answers of an event: stock came back here.
    pub fn clear_sold_out(&self, event: &str) {
        let mut map = self.sold_out.write();
        if !map.is_empty() {
            map.retain(|(e, _), until| e != event && *until > Instant::now());
        }
    }
}

pub type Shared = Arc<AppState>;

/// The error of every handler: status + `{"error","message"}`.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// `available` in the body (`409 not_enough_left`: the most the buyer may hold now).
    pub available: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError { status, code, message: message.into(), available: None }
    }
    fn bad_request(m: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", m)
    }
    fn not_found(m: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", m)
    }
    fn unauthorized(m: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", m)
    }
    fn conflict(code: &'static str, m: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, code, m)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = json!({"error": self.code, "message": self.message});
        if let Some(n) = self.available {
            body["available"] = json!(n);
        }
        let mut resp = (self.status, axum::Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if self.code == DURABILITY_TIMEOUT {
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        resp.extensions_mut().insert(ErrorCode(self.code));
        resp
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        tracing::warn!(error = %e, "store call failed");
        match e {
            StoreError::Unavailable(_) => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", "the sale store is unavailable; retry"),
            StoreError::OutcomeUnknown(_) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "the outcome is unknown; retry with the same idempotency key",
            ),
            StoreError::Internal(_) => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", "the sale store answered unexpectedly"),
            StoreError::ReadOnly(m) => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "store_read_only", m),
            StoreError::DurabilityTimeout(m) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                DURABILITY_TIMEOUT,
                format!(
                    "the change was made but not yet confirmed by the store's replicas ({m}); retry the same \
                     request (a hold with the same idempotency key answers with its order)"
                ),
            ),
        }
    }
}

/// The error code of a change the store made but could not confirm on its replicas (or AOF) in time.
pub const DURABILITY_TIMEOUT: &str = "durability_timeout";

/// Marks a response with its error code, so the guard can count what needs counting.
#[derive(Debug, Clone, Copy)]
struct ErrorCode(&'static str);

type ApiResult = Result<Response, ApiError>;

fn json_response(status: StatusCode, v: impl Serialize) -> Response {
    (status, axum::Json(v)).into_response()
}

/// Builds the router over `state`.
pub fn router(state: Shared) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/v1/events/{event}", get(get_event).put(put_event))
        .route("/v1/events/{event}/pause", post(pause))
        .route("/v1/events/{event}/resume", post(resume))
        .route("/v1/events/{event}/stock", get(stock))
        .route("/v1/events/{event}/holds", post(hold))
        .route("/v1/events/{event}/outbox", get(outbox))
        .route("/v1/events/{event}/reconcile", get(reconcile))
        .route("/v1/orders/{order}", get(get_order))
        .route("/v1/orders/{order}/cancel", post(cancel))
        .route("/v1/orders/{order}/redeem", post(redeem))
        .route("/v1/orders/{order}/refund", post(refund))
        .route("/v1/payments/callback", post(payment_callback))
        .fallback(|| async { ApiError::not_found("no such route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "bad_request", "method not allowed on this route")
        })
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state)
}

/// Decrements the in-flight count when a request ends, however it ends.
struct InflightGuard<'a>(&'a AppState);

impl Drop for InflightGuard<'_> {
    fn drop(&mut self) {
        self.0.inflight.fetch_sub(1, Ordering::Relaxed);
        self.0.metrics.inflight.dec();
    }
}

/// Runs around every request: the core's own concurrency limit (a quick 503 beats a slow queue), and the
/// latency histogram by route that the edge's controller reads.
async fn guard(State(st): State<Shared>, req: Request, next: Next) -> Response {
    let route = req.extensions().get::<MatchedPath>().map(|p| route_label(p.as_str())).unwrap_or("other");
    if st.inflight.fetch_add(1, Ordering::Relaxed) >= st.max_inflight {
        st.inflight.fetch_sub(1, Ordering::Relaxed);
        st.metrics.responses.with_label_values(&[route, "503"]).inc();
        return ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", "the core is at its concurrency limit; retry")
            .into_response();
    }
    st.metrics.inflight.inc();
    let _g = InflightGuard(&st);
    let started = Instant::now();
    let resp = next.run(req).await;
    let class = match resp.status().as_u16() {
        200..=299 => "2xx",
        400..=499 => "4xx",
        _ => "5xx",
    };
    st.metrics.latency.with_label_values(&[route]).observe(started.elapsed().as_secs_f64());
    st.metrics.responses.with_label_values(&[route, class]).inc();
    if resp.extensions().get::<ErrorCode>().is_some_and(|c| c.0 == DURABILITY_TIMEOUT) {
        st.metrics.durability_timeouts.with_label_values(&[route]).inc();
    }
    resp
}

fn route_label(path: &str) -> &'static str {
    match path {
        "/v1/events/{event}/holds" => "hold",
        "/v1/events/{event}" => "event",
        "/v1/events/{event}/stock" => "stock",
        "/v1/events/{event}/pause" | "/v1/events/{event}/resume" => "pause",
        "/v1/events/{event}/outbox" => "outbox",
        "/v1/events/{event}/reconcile" => "reconcile",
        "/v1/orders/{order}" => "order",
        "/v1/orders/{order}/cancel" => "cancel",
        "/v1/orders/{order}/redeem" => "redeem",
        "/v1/orders/{order}/refund" => "refund",
        "/v1/payments/callback" => "payment",
        "/metrics" => "metrics",
        "/healthz" => "healthz",
        _ => "other",
    }
}

async fn healthz(State(st): State<Shared>) -> Response {
    json_response(StatusCode::OK, json!({"status": "ok", "rechecking": st.is_rechecking()}))
}

async fn metrics(State(st): State<Shared>) -> Response {
    st.metrics.redis_unreplicated.set(st.store.unreplicated_masters() as i64);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], st.metrics.render()).into_response()
}

// ------------------------------------------------------------------ helpers

async fn read_body(body: Body) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(body, MAX_BODY).await.map_err(|_| {
        ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", format!("request bodies are limited to {MAX_BODY} bytes"))
    })
}

/// Reads every JSON body: an object at the top and wherever a struct is expected ([`strict_json`]), each
/// refusal naming its path.
fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    strict_json::object_from_slice(bytes).map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then_some(token.trim())
}

fn is_admin(st: &AppState, headers: &HeaderMap) -> bool {
    bearer(headers).is_some_and(|t| !st.admin_token.is_empty() && bool::from(t.as_bytes().ct_eq(st.admin_token.as_bytes())))
}

fn require_admin(st: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    if is_admin(st, headers) { Ok(()) } else { Err(ApiError::unauthorized("admin bearer token required")) }
}

fn check_event_id(event: &str) -> Result<(), ApiError> {
    if valid_event_id(event) { Ok(()) } else { Err(ApiError::not_found(format!("no event {event:?}"))) }
}

fn token_claims(st: &AppState, headers: &HeaderMap, event: &str) -> Result<AdmissionClaims, ApiError> {
    let token = bearer(headers).ok_or_else(|| ApiError::unauthorized("admission token required (Authorization: Bearer)"))?;
    st.keys.verify(token, event).map_err(|e| ApiError::unauthorized(e.to_string()))
}

/// The order as the API shows it.
pub fn order_json(o: &Order) -> Value {
    json!({
        "order_id": o.order_id,
        "event": o.event,
        "sku": o.sku,
        "qty": o.qty,
        "seats": o.seats,
        "user": o.user,
        "state": o.state,
        "version": o.version,
        "amount_cents": o.amount_cents,
        "expires_at": rfc3339_ms(o.expires_at_ms),
        "created_at": rfc3339_ms(o.created_at_ms),
        "redeemed_pools": o.redeemed_pools,
        "txn_id": o.txn_id,
    })
}

async fn event_status(st: &AppState, rec: &EventRecord) -> Result<&'static str, ApiError> {
    let now = st.store.now_ms().await.map_err(StoreError::read)?;
    if now >= rec.spec.closes_at_ms() {
        return Ok("closed");
    }
    if now < rec.spec.opens_at_ms() {
        return Ok("scheduled");
    }
    if rec.paused || st.is_rechecking() {
        return Ok("paused");
    }
    let stock = st.store.stock(&rec.id).await.map_err(StoreError::read)?.unwrap_or_default();
    if !stock.skus.is_empty() && stock.skus.values().all(|s| s.sold_out) {
        return Ok("sold_out");
    }
    Ok("open")
}

// ------------------------------------------------------------------ events

async fn put_event(
    State(st): State<Shared>,
    Path(event): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult {
    require_admin(&st, &headers)?;
    if !valid_event_id(&event) {
        return Err(ApiError::bad_request("event ids are 1..=64 of [A-Za-z0-9_.-]"));
    }
    let force = match q.get("force").map(String::as_str) {
        None | Some("false") => false,
        Some("true") | Some("1") => true,
        Some(other) => return Err(ApiError::bad_request(format!("force must be true or false, got {other:?}"))),
    };
    let bytes = read_body(body).await?;
    // Every wrong type, unknown and missing field at once, each with its path; then every rule.
    let bad = |errs: Vec<FieldError>| {
        json_response(
            StatusCode::BAD_REQUEST,
            json!({"error": "bad_request", "message": errs.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "), "errors": errs}),
        )
    };
    let spec = match EventSpec::read_checked(&bytes) {
        Ok(spec) => spec,
        Err(errs) => return Ok(bad(errs)),
    };
    match st.store.put_event(&event, &spec, force).await? {
        PutEventOutcome::Created => {
            tracing::info!(event, "event created");
            Ok(json_response(StatusCode::CREATED, json!({"event": event, "result": "created"})))
        }
        PutEventOutcome::Updated => {
            if force {
                tracing::warn!(event, "event updated with force while the sale may be open");
            } else {
                tracing::info!(event, "event updated");
            }
            st.clear_sold_out(&event);
            Ok(json_response(StatusCode::OK, json!({"event": event, "result": "updated"})))
        }
        PutEventOutcome::NeedsForce(m) => Err(ApiError::conflict("invalid_transition", m)),
        PutEventOutcome::Rejected(errs) => Ok(json_response(
            StatusCode::CONFLICT,
            json!({"error": "invalid_transition", "message": errs.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "), "errors": errs}),
        )),
    }
}

async fn get_event(State(st): State<Shared>, Path(event): Path<String>) -> ApiResult {
    check_event_id(&event)?;
    let rec = st.store.get_event(&event).await.map_err(StoreError::read)?.ok_or_else(|| ApiError::not_found(format!("no event {event}")))?;
    let status = event_status(&st, &rec).await?;
    let mut v = serde_json::to_value(&rec.spec).map_err(|e| ApiError::bad_request(e.to_string()))?;
    if let Value::Object(m) = &mut v {
        m.insert("id".into(), json!(event));
        m.insert("status".into(), json!(status));
        m.insert("paused".into(), json!(rec.paused));
    }
    Ok(json_response(StatusCode::OK, v))
}

async fn set_paused(st: &AppState, headers: &HeaderMap, event: &str, paused: bool) -> ApiResult {
    require_admin(st, headers)?;
    check_event_id(event)?;
    if !st.store.set_paused(event, paused).await? {
        return Err(ApiError::not_found(format!("no event {event}")));
    }
    tracing::warn!(event, paused, "event pause changed by an operator");
    Ok(json_response(StatusCode::OK, json!({"event": event, "paused": paused})))
}

async fn pause(State(st): State<Shared>, Path(event): Path<String>, headers: HeaderMap) -> ApiResult {
    set_paused(&st, &headers, &event, true).await
}

async fn resume(State(st): State<Shared>, Path(event): Path<String>, headers: HeaderMap) -> ApiResult {
    set_paused(&st, &headers, &event, false).await
}

async fn stock(State(st): State<Shared>, Path(event): Path<String>) -> ApiResult {
    check_event_id(&event)?;
    let s = st.store.stock(&event).await.map_err(StoreError::read)?.ok_or_else(|| ApiError::not_found(format!("no event {event}")))?;
    Ok(json_response(StatusCode::OK, s))
}

// ------------------------------------------------------------------ holds

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HoldBody {
    sku: String,
    qty: i64,
    idempotency_key: String,
    #[serde(default)]
    identity: Identity,
    #[serde(default)]
    seats: Option<Vec<String>>,
    /// Join the waitlist when told "sold out" while unpaid holds may give tickets back (issue #39).
    #[serde(default)]
    wait: bool,
}

fn bounded(name: &str, v: &Option<String>) -> Result<(), ApiError> {
    match v {
        Some(s) if s.is_empty() || s.len() > 128 => Err(ApiError::bad_request(format!("identity.{name} must be 1..=128 characters"))),
        _ => Ok(()),
    }
}

async fn hold(State(st): State<Shared>, Path(event): Path<String>, headers: HeaderMap, body: Body) -> ApiResult {
    check_event_id(&event)?;
    let bytes = read_body(body).await?;
    let b: HoldBody = parse_json(&bytes)?;
    if !valid_id(&b.sku) {
        return Err(ApiError::bad_request("sku must be 1..=64 of [A-Za-z0-9_.+-]"));
    }
    if b.qty <= 0 || b.qty > 100 {
        return Err(ApiError::bad_request("qty must be a positive number of tickets"));
    }
    if b.idempotency_key.is_empty() || b.idempotency_key.len() > 128 {
        return Err(ApiError::bad_request("idempotency_key must be 1..=128 characters"));
    }
    bounded("phone", &b.identity.phone)?;
    bounded("id_number", &b.identity.id_number)?;
    bounded("device", &b.identity.device)?;
    let seats = b.seats.unwrap_or_default();
    if seats.len() > 100 || seats.iter().any(|s| !valid_id(s)) {
        return Err(ApiError::bad_request("seats must be at most 100 seat ids"));
    }
    let claims = token_claims(&st, &headers, &event)?;
    let qty = b.qty as u32;
    let fingerprint = HoldRequest::fingerprint_of(&b.sku, qty, &b.identity, &seats);
    // Idempotency first, then shortcuts: a replay (same user, key and body) is answered from the order it
    // made, even while the SKU is remembered sold out or holds are paused for a re-check. Only when a shortcut
    // would answer is the store asked (one read); otherwise the hold step does the same check itself.
    // A hold that asks to wait always reaches the store: the waitlist is there.
    let sold_out = !b.wait && st.is_sold_out(&event, &b.sku);
    if sold_out || st.is_rechecking() {
        match st.store.find_replay(&event, &claims.sub, &b.idempotency_key, &fingerprint).await.map_err(StoreError::read)? {
            Some(HoldOutcome::Replay(o)) => {
                st.metrics.holds.with_label_values(&["replay"]).inc();
                return Ok(json_response(StatusCode::OK, hold_json(&o)));
            }
            Some(_) => {
                st.metrics.holds.with_label_values(&["idem_conflict"]).inc();
                return Err(ApiError::conflict("idem_conflict", "this idempotency key was used with another request body"));
            }
            None => {}
        }
    }
    // Sold out is known here: answer without touching the store (the token stays unused).
    if sold_out {
        st.metrics.holds.with_label_values(&["sold_out_cached"]).inc();
        return Err(ApiError::conflict("sold_out", format!("{} is sold out", b.sku)));
    }
    // Before the store is asked, so the token's jti stays unused and the buyer can retry with it.
    if st.is_rechecking() {
        st.metrics.holds.with_label_values(&["rechecking"]).inc();
        let mut resp = ApiError::new(
            StatusCode::FORBIDDEN,
            "event_paused",
            "the sale is paused while unpaid orders are re-checked with the payment provider (the sale store \
             restarted, or this core just started); retry in a few seconds",
        )
        .into_response();
        resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("2"));
        return Ok(resp);
    }
    if qty > claims.max_qty {
        return Err(ApiError::bad_request(format!("qty {qty} is over this admission's max_qty {}", claims.max_qty)));
    }
    // Bounded by the token's checks; an overflow here would let the store forget the jti at once.
    let jti_expires_ms = claims.jti_expires_ms().ok_or_else(|| ApiError::unauthorized("token claims invalid: exp"))?;
    let req = HoldRequest {
        event: event.clone(),
        order_id: new_order_id(&event),
        sku: b.sku,
        qty,
        seats,
        user: claims.sub,
        identity: b.identity,
        idempotency_key: b.idempotency_key,
        fingerprint,
        jti: claims.jti,
        jti_expires_ms,
        wait: b.wait,
    };
    let outcome = st.store.hold(&req).await.inspect_err(|e| {
        st.metrics.store_errors.with_label_values(&[store_error_kind(e)]).inc();
    })?;
    let label = match &outcome {
        HoldOutcome::Created(_) => "created",
        HoldOutcome::Replay(_) => "replay",
        HoldOutcome::SoldOut(so) if so.left > 0 => "not_enough_left",
        HoldOutcome::SoldOut(so) if so.listed => "waitlisted",
        HoldOutcome::SoldOut(_) => "sold_out",
        HoldOutcome::LimitExceeded(_) => "limit",
        HoldOutcome::TokenReplay => "token_replay",
        HoldOutcome::IdemConflict => "idem_conflict",
        HoldOutcome::SeatTaken(_) => "seat_taken",
        HoldOutcome::NotOpen => "not_open",
        HoldOutcome::Paused => "paused",
        HoldOutcome::NotFound => "not_found",
        HoldOutcome::Rejected(_) => "rejected",
    };
    st.metrics.holds.with_label_values(&[label]).inc();
    match outcome {
        HoldOutcome::Created(o) => {
            st.metrics.transitions.with_label_values(&["CREATED"]).inc();
            Ok(json_response(StatusCode::CREATED, hold_json(&o)))
        }
        HoldOutcome::Replay(o) => Ok(json_response(StatusCode::OK, hold_json(&o))),
        HoldOutcome::SoldOut(so) if so.left > 0 => {
            // Fewer left than asked for: say how many, so the buyer may take those — the token is still unused.
            Err(ApiError {
                available: Some(so.left),
                ..ApiError::conflict("not_enough_left", format!("only {} left of {}", so.left, req.sku))
            })
        }
        HoldOutcome::SoldOut(so) if so.listed => {
            // Sold out for now: unpaid holds may give tickets back, and this fan is on the waitlist for
            // them (issue #39) while it asks again within `WAIT_LIVE_MS` with the same, still unused, token.
            let body = json!({
                "error": "sold_out",
                "message": "every ticket is held for now; unpaid holds may give some back, and fans told this first get them first: ask again within 10 s to keep your turn",
                "restock_possible": true,
                "returning": so.returning,
                "waitlist_ahead": so.ahead,
            });
            let mut resp = json_response(StatusCode::CONFLICT, body);
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("2"));
            resp.extensions_mut().insert(ErrorCode("sold_out"));
            Ok(resp)
        }
        HoldOutcome::SoldOut(_) => {
            // Remembered for a moment, so a rush of holds that do not wait is answered without the store.
            st.sold_out.write().insert((event.clone(), req.sku.clone()), Instant::now() + SOLD_OUT_TTL);
            Err(ApiError::conflict("sold_out", "not enough tickets left"))
        }
        HoldOutcome::LimitExceeded(d) => {
            Err(ApiError::conflict("limit_exceeded", format!("the purchase limit per {} is reached", d.as_str())))
        }
        HoldOutcome::TokenReplay => Err(ApiError::conflict("token_replay", "this admission token was already used")),
        HoldOutcome::IdemConflict => {
            Err(ApiError::conflict("idem_conflict", "this idempotency key was used with another request body"))
        }
        HoldOutcome::SeatTaken(s) => Err(ApiError::conflict("sold_out", format!("seat {s} is taken"))),
        HoldOutcome::NotOpen => Err(ApiError::new(StatusCode::FORBIDDEN, "event_not_open", "the sale is not open")),
        HoldOutcome::Paused => Err(ApiError::new(StatusCode::FORBIDDEN, "event_paused", "the sale is paused")),
        HoldOutcome::NotFound => Err(ApiError::not_found(format!("no event {event}"))),
        HoldOutcome::Rejected(m) => Err(ApiError::bad_request(m)),
    }
}

fn store_error_kind(e: &StoreError) -> &'static str {
    match e {
        StoreError::Unavailable(_) => "unavailable",
        StoreError::OutcomeUnknown(_) => "outcome_unknown",
        StoreError::Internal(_) => "internal",
        StoreError::ReadOnly(_) => "read_only",
        StoreError::DurabilityTimeout(_) => "durability_timeout",
    }
}

fn hold_json(o: &Order) -> Value {
    json!({
        "order_id": o.order_id,
        "state": o.state,
        "sku": o.sku,
        "qty": o.qty,
        "seats": o.seats,
        "amount_cents": o.amount_cents,
        "expires_at": rfc3339_ms(o.expires_at_ms),
    })
}

// ------------------------------------------------------------------ orders

async fn load_order(st: &AppState, order: &str) -> Result<Order, ApiError> {
    if event_of_order(order).is_none() {
        return Err(ApiError::not_found(format!("no order {order:?}")));
    }
    st.store.get_order(order).await.map_err(StoreError::read)?.ok_or_else(|| ApiError::not_found(format!("no order {order}")))
}

/// Admin, or the admission-token holder whose `sub` bought the order.
async fn authorize_order(st: &AppState, headers: &HeaderMap, order: &str) -> Result<Order, ApiError> {
    let Some(event) = event_of_order(order) else {
        return Err(ApiError::not_found(format!("no order {order:?}")));
    };
    if is_admin(st, headers) {
        return load_order(st, order).await;
    }
    let claims = token_claims(st, headers, event)?;
    let o = load_order(st, order).await?;
    if o.user != claims.sub {
        // Same answer as a missing order: don't tell strangers which ids exist.
        return Err(ApiError::not_found(format!("no order {order}")));
    }
    Ok(o)
}

async fn get_order(State(st): State<Shared>, Path(order): Path<String>, headers: HeaderMap) -> ApiResult {
    let o = authorize_order(&st, &headers, &order).await?;
    Ok(json_response(StatusCode::OK, order_json(&o)))
}

fn transition_response(st: &AppState, out: TransitionOutcome, what: &str) -> ApiResult {
    match out {
        TransitionOutcome::Done(o) => {
            st.metrics.transitions.with_label_values(&[o.state.as_str()]).inc();
            Ok(json_response(StatusCode::OK, order_json(&o)))
        }
        TransitionOutcome::Invalid(o) => {
            Err(ApiError::conflict("invalid_transition", format!("cannot {what} an order in state {}", o.state.as_str())))
        }
        TransitionOutcome::NotDue(_) => Err(ApiError::conflict("invalid_transition", "the hold has not expired yet")),
        TransitionOutcome::UnknownPool => Err(ApiError::not_found("the order has no such pool")),
        TransitionOutcome::NotFound => Err(ApiError::not_found("no such order")),
    }
}

async fn cancel(State(st): State<Shared>, Path(order): Path<String>, headers: HeaderMap) -> ApiResult {
    let o = authorize_order(&st, &headers, &order).await?;
    let out = st.store.close(&o.order_id, CloseReason::Cancelled).await?;
    if matches!(out, TransitionOutcome::Done(_)) {
        st.clear_sold_out(&o.event);
    }
    transition_response(&st, out, "cancel")
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RedeemBody {
    #[serde(default)]
    pool: Option<String>,
}

async fn redeem(State(st): State<Shared>, Path(order): Path<String>, headers: HeaderMap, body: Body) -> ApiResult {
    require_admin(&st, &headers)?;
    let bytes = read_body(body).await?;
    let b: RedeemBody = if bytes.iter().all(u8::is_ascii_whitespace) { RedeemBody::default() } else { parse_json(&bytes)? };
    if b.pool.as_deref().is_some_and(|p| !valid_id(p)) {
        return Err(ApiError::bad_request("pool must be a pool id"));
    }
    load_order(&st, &order).await?;
    let out = st.store.redeem(&order, b.pool.as_deref()).await?;
    transition_response(&st, out, "redeem")
}

async fn refund(State(st): State<Shared>, Path(order): Path<String>, headers: HeaderMap) -> ApiResult {
    require_admin(&st, &headers)?;
    let o = load_order(&st, &order).await?;
    let out = st.store.refund(&order).await?;
    if matches!(out, TransitionOutcome::Done(_)) {
        st.clear_sold_out(&o.event);
    }
    transition_response(&st, out, "refund")
}

// ------------------------------------------------------------------ payments

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CallbackBody {
    order_id: String,
    txn_id: String,
    amount_cents: u64,
    status: String,
}

async fn payment_callback(State(st): State<Shared>, headers: HeaderMap, body: Body) -> ApiResult {
    let bytes = read_body(body).await?;
    let sig = headers.get("wicket-signature").and_then(|v| v.to_str().ok());
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    verify_signature(sig, &bytes, st.callback_secret.as_bytes(), now, st.signature_tolerance).map_err(|e| {
        st.metrics.payments.with_label_values(&["bad_signature"]).inc();
        ApiError::unauthorized(e.to_string())
    })?;
    let b: CallbackBody = parse_json(&bytes)?;
    if b.txn_id.is_empty() || b.txn_id.len() > 128 {
        return Err(ApiError::bad_request("txn_id must be 1..=128 characters"));
    }
    if b.status != "SUCCESS" {
        st.metrics.payments.with_label_values(&["ignored"]).inc();
        return Ok(json_response(StatusCode::OK, json!({"result": "ignored", "status": b.status})));
    }
    if event_of_order(&b.order_id).is_none() {
        return Err(ApiError::not_found(format!("no order {:?}", b.order_id)));
    }
    let req = PaymentRequest { order_id: b.order_id, txn_id: b.txn_id, amount_cents: b.amount_cents };
    let out = st.store.pay(&req).await?;
    pay_response(&st, out)
}

fn pay_response(st: &AppState, out: PayOutcome) -> ApiResult {
    let (result, order) = match out {
        PayOutcome::Paid(o) => {
            st.metrics.transitions.with_label_values(&["PAID"]).inc();
            ("paid", o)
        }
        PayOutcome::AlreadyPaid(o) => ("already_paid", o),
        PayOutcome::RefundRequired(o) => {
            tracing::warn!(order = o.order_id, state = o.state.as_str(), "payment for an order that cannot take it: refund required");
            ("refund_required", o)
        }
        PayOutcome::AmountMismatch { expected } => {
            st.metrics.payments.with_label_values(&["amount_mismatch"]).inc();
            return Err(ApiError::conflict("amount_mismatch", format!("the order costs {expected} cents")));
        }
        PayOutcome::NotFound => {
            st.metrics.payments.with_label_values(&["not_found"]).inc();
            return Err(ApiError::not_found("no such order"));
        }
    };
    st.metrics.payments.with_label_values(&[result]).inc();
    Ok(json_response(StatusCode::OK, json!({"result": result, "order_id": order.order_id, "state": order.state})))
}

// ------------------------------------------------------------------ outbox, reconcile

async fn outbox(
    State(st): State<Shared>,
    Path(event): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> ApiResult {
    require_admin(&st, &headers)?;
    check_event_id(&event)?;
    let after = q.get("after").map(String::as_str).filter(|a| *a != "0");
    if let Some(a) = after
        && crate::store::embedded::parse_cursor(a).is_none()
    {
        return Err(ApiError::bad_request("after must be a cursor from an earlier page (or 0)"));
    }
    let limit = match q.get("limit") {
        None => 100,
        Some(l) => match l.parse::<usize>() {
            Ok(n) if (1..=crate::store::MAX_OUTBOX_PAGE).contains(&n) => n,
            _ => return Err(ApiError::bad_request("limit must be 1..=1000")),
        },
    };
    if st.store.get_event(&event).await.map_err(StoreError::read)?.is_none() {
        return Err(ApiError::not_found(format!("no event {event}")));
    }
    let entries = st.store.outbox(&event, after, limit).await.map_err(StoreError::read)?;
    let cursor = entries.last().map(|e| e.cursor.clone()).unwrap_or_else(|| after.unwrap_or("0").to_string());
    Ok(json_response(StatusCode::OK, json!({"entries": entries, "cursor": cursor})))
}

async fn reconcile(State(st): State<Shared>, Path(event): Path<String>, headers: HeaderMap) -> ApiResult {
    require_admin(&st, &headers)?;
    check_event_id(&event)?;
    let rep = st.store.reconcile(&event).await?.ok_or_else(|| ApiError::not_found(format!("no event {event}")))?;
    st.metrics.reconcile_ok.with_label_values(&[event.as_str()]).set(rep.ok as i64);
    Ok(json_response(StatusCode::OK, rep))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A read that got no answer changed nothing: it says "retry", not "retry with the same idempotency key"
    /// (which it said to a `GET` after a cut Redis connection). A write without an answer still says so.
    #[test]
    fn a_read_without_an_answer_is_plain_unavailable() {
        let read = ApiError::from(StoreError::OutcomeUnknown("connection dropped".into()).read());
        assert_eq!((read.status, read.code), (StatusCode::SERVICE_UNAVAILABLE, "unavailable"));
        assert!(!read.message.contains("idempotency"), "{}", read.message);
        let write = ApiError::from(StoreError::OutcomeUnknown("connection dropped".into()));
        assert!(write.message.contains("idempotency key"), "{}", write.message);
        let other = StoreError::ReadOnly("disk".into()).read();
        assert!(matches!(other, StoreError::ReadOnly(_)));
    }
}
