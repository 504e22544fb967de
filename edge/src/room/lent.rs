//! What the edge lends the waiting room's endpoints ([`super::http`], [`super::invite_http`]):
//! handles, not the edge's whole state.

use bytes::Bytes;
use pingora::proxy::Session;

/// What the queue's endpoints use of the edge around them, lent by the caller
/// (`EdgeState::queue_edge`): the rooms, the bot checks, the queue page, the cookie attributes, the
/// body limits and the event streams' budget. The room module takes these handles, not the edge's whole state.
pub struct QueueEdge<'a> {
    /// The rooms.
    pub rooms: &'a super::Rooms,
    /// Proof-of-work, CAPTCHA and bot passes.
    pub bot: &'a crate::bot::BotChecks,
    /// The queue page.
    pub queue_page: &'a super::page::QueuePage,
    /// `Secure` on cookies.
    pub secure_cookies: bool,
    /// `max-body-bytes`.
    pub max_body: usize,
    /// The client-side deadlines (the body's).
    pub timeouts: crate::body::Timeouts,
    /// The edge's budget of open event streams.
    pub event_streams: &'a std::sync::Arc<super::events::StreamBudget>,
    /// `wicket_edge_rejects_total` (an event stream refused for the budget).
    pub rejects: &'a prometheus::IntCounterVec,
}

impl QueueEdge<'_> {
    /// A `Set-Cookie` value with the edge's attributes.
    pub fn cookie(&self, name: &str, value: &str, max_age: u64) -> String {
        crate::identity::set_cookie(name, value, max_age, self.secure_cookies)
    }

    /// Reads the request's body within the edge's limits ([`crate::body::read`]).
    pub async fn read_body(&self, session: &mut Session) -> Result<Bytes, crate::reject::Reject> {
        crate::body::read(session, self.max_body, &self.timeouts).await
    }
}
