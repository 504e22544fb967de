//! A fan's event stream (`GET /queue/<room>/events`) between its frames: what it needs and
//! nothing more — the room, the fan's ticket and identity, the room's pulse and when it last
//! spoke — so that a door can hold a million of them ([`EventFrames`]). The fast doors (HTTP/1.1
//! and HTTP/2) serve a queued fan's stream on a small task of their own; the proxy
//! ([`super::http`]) serves the others. All draw the same frames from here.
//!
//! Every open stream holds a slot of the edge's [`StreamBudget`]: at most `max-event-streams`
//! in all and `max-event-streams-per-ip` from one client address; over either, the stream is
//! refused (503, `unavailable`) and the queue page polls instead. A stream lasts at most
//! `event-stream-seconds` (the browser then opens another).

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use dashmap::DashMap;
use tokio::time::Instant;

use super::ticket::QueueTicket;
use super::{Phase, Room, Rooms, StatusOutcome};
use crate::reject::Reject;

/// How often a stream looks at its status when nothing wakes it (the place moves, the turn
/// comes); a room-wide change (its pulse) wakes it at once.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// A waiting place whose turn is at least this far off by its ETA's low end looks at its status
/// at the interval the room tells a polling fan there (at most [`FAR_LOOK`]) instead of every
/// second, and is sent a frame at most every [`FAR_FRAME_MS`]: its
/// turn cannot come before the release has let in everyone ahead, and a room-wide change still
/// wakes it at once. Most places of a big sale are that far back; the last ones before the front
/// keep looking every second.
const FAR_SECONDS: u64 = 10;

/// A place this few ahead of the front before the open, or behind "sold out for now", is near
/// the front (a waiting place: under [`FAR_SECONDS`] by its ETA) — its stream wakes when the front
/// moves ([`Room::front`]). The first step reaches a few hundred places, a hold that frees a
/// ticket the next; a million streams woken at each step would look for nothing.
const NEAR_AHEAD: u64 = 1000;

/// How often such a far place looks at most.
const FAR_LOOK: Duration = Duration::from_secs(5);

/// A far place gets a frame at its poll interval up to this (others: up to 5 s). The frame, not
/// the look, is most of an open stream's CPU (its JSON and its write); a fan hours from the front
/// sees its place move every 15 s.
const FAR_FRAME_MS: u64 = 15_000;

/// The `retry` field of a stream's first frame: the browser's `EventSource` reconnects a second
/// after the stream ends (at `event-stream-seconds`, or a connection lost), not its default 3 s.
const RECONNECT: &str = "retry: 1000\n";

/// An open stream's state between frames.
pub struct EventFrames {
    room: Arc<Room>,
    ticket: QueueTicket,
    /// What places, sessions and tokens are keyed by: the user, else the device.
    sub: Box<str>,
    /// The room's pulse; `None` once the room is gone (the timer alone, until the status says so).
    pulse: Option<tokio::sync::watch::Receiver<u64>>,
    /// The front of the queue ([`Room::front`]), waited on while the place is near it: a step
    /// that lets people in wakes the stream at once.
    front: tokio::sync::watch::Receiver<(u64, u64)>,
    /// The last look found the place near the front ([`NEAR_AHEAD`], [`FAR_SECONDS`]).
    near: bool,
    /// What the last frame said: (state, restock possible, no ETA).
    last: Option<(Phase, bool, bool)>,
    last_sent: Instant,
    /// When the stream ends at the latest (`event-stream-seconds` after it opened).
    until: Instant,
    /// The status was looked at once (the next look waits first).
    looked: bool,
    /// How long the next look waits, unless the room's pulse comes first.
    look_after: Duration,
    ended: bool,
}

impl EventFrames {
    /// A stream for the fan holding `ticket` (as `sub`) in `room`, open for at most `max`
    /// ([`StreamBudget::longest`]).
    pub fn new(room: Arc<Room>, ticket: QueueTicket, sub: &str, max: Duration) -> Self {
        let pulse = Some(room.pulse());
        let front = room.front();
        let now = Instant::now();
        EventFrames {
            room,
            ticket,
            sub: sub.into(),
            pulse,
            front,
            near: true,
            last: None,
            last_sent: now,
            until: now + max,
            looked: false,
            look_after: LOOK_EVERY,
            ended: false,
        }
    }

    /// The next frame to send (`data: <status JSON>\n\n`), after waiting as long as the stream
    /// has nothing new to say; `None`: the stream ends (admitted, closed, sold out for good, the
    /// place lost, the room's state unreadable, or the stream's time is up).
    ///
    /// The status is looked at every second (a place far from the front: at its poll interval,
    /// [`FAR_SECONDS`]), at once when the room says that what every fan sees may have changed (its
    /// pulse: an operator's pause, resume or queue-all, a sale selling out or stock coming back),
    /// and, near the front, at once when the front moves (a release step). A frame goes out when
    /// the state changed (or "is anything being released"), else at the poll interval (the place
    /// and the ETA; at most 5 s, 15 s far from the front).
    ///
    /// Cancel-safe between frames: dropped while it waits, nothing is lost.
    pub async fn next(&mut self, rooms: &Rooms) -> Option<String> {
        loop {
            if self.ended {
                return None;
            }
            if self.looked {
                self.wait().await;
            }
            self.looked = true;
            // What the front did before this look is in it: only a later move wakes the stream.
            self.front.borrow_and_update();
            // Boxed: the look (which may read the room's store) is allocated while it runs, so a
            // stream that waits holds only the wait's state.
            let frame = match Box::pin(rooms.status(&self.room, &self.ticket, &self.sub)).await {
                Ok(StatusOutcome::Status(mut s)) => {
                    if s.state == Phase::Admitted {
                        // The stream cannot set the admission cookie: the page goes through
                        // /queue/<room>, which sets it and redirects to the target.
                        s.token = None;
                        s.redirect = Some(format!("/queue/{}", self.room.id));
                    }
                    s
                }
                Ok(StatusOutcome::Rejoin) | Err(_) => {
                    self.ended = true;
                    return None;
                }
            };
            let far = matches!((frame.state, &frame.eta_seconds), (Phase::Waiting, Some(eta)) if eta.low >= FAR_SECONDS);
            let wait = Duration::from_millis(frame.poll_after_ms.min(if far { FAR_FRAME_MS } else { 5000 }));
            self.look_after = if far { wait.clamp(LOOK_EVERY, FAR_LOOK) } else { LOOK_EVERY };
            self.near = match frame.state {
                Phase::Waiting => !far,
                Phase::NotOpen | Phase::SoldOut => frame.ahead.is_some_and(|a| a < NEAR_AHEAD),
                _ => false,
            };
            let done = matches!(frame.state, Phase::Admitted | Phase::Closed) || (frame.state == Phase::SoldOut && !frame.restock_possible);
            let key = (frame.state, frame.restock_possible, frame.eta_seconds.is_none());
            let send = done || self.last.as_ref() != Some(&key) || self.last_sent.elapsed() >= wait;
            self.ended = done || Instant::now() + self.look_after > self.until;
            if send {
                // The first frame tells the browser to come back within a second when the stream
                // ends (its default is about 3 s): a fan whose turn comes while it reconnects
                // is admitted within its place's pickup window ([`super::told::Told`]).
                let retry = if self.last.is_none() { RECONNECT } else { "" };
                self.last = Some(key);
                self.last_sent = Instant::now();
                return Some(format!("data: {}\n{retry}\n", serde_json::to_string(&frame).unwrap_or_default()));
            }
        }
    }

    /// Until the next look: a second (or, far from the front, the poll interval), the room's
    /// pulse, or near the front the front moving.
    async fn wait(&mut self) {
        let near = self.near;
        let front = &mut self.front;
        let gone = tokio::select! {
            // A room that is gone has no front to move: its pulse says so.
            _ = async { if !near || front.changed().await.is_err() { std::future::pending::<()>().await } } => false,
            r = async {
                match self.pulse.as_mut() {
                    Some(p) => p.changed().await.is_err(),
                    None => std::future::pending::<bool>().await,
                }
            } => r,
            _ = tokio::time::sleep(self.look_after) => false,
        };
        if gone {
            // The room was removed: the timer alone, until the status says so.
            self.pulse = None;
        }
    }
}

/// How many event streams may be open: in all, and from one client address.
pub struct StreamBudget {
    max: usize,
    longest: Duration,
    max_per_ip: u32,
    open: AtomicUsize,
    per_ip: DashMap<IpAddr, u32>,
    /// `wicket_edge_event_streams`.
    gauge: prometheus::IntGauge,
}

/// Why a stream was refused a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// `max-event-streams` are open.
    Edge,
    /// `max-event-streams-per-ip` are open from this address.
    Address,
}

impl Full {
    /// The refusal every door answers with ([`Reject::EventStreamsFull`]: 503 `unavailable`,
    /// `Retry-After: 5`), decided by the decision step ([`crate::decide`]).
    pub fn reject(self) -> Reject {
        Reject::EventStreamsFull { per_ip: self == Full::Address }
    }
}

/// One open stream's slot; given back when dropped.
pub struct StreamSlot {
    budget: Arc<StreamBudget>,
    ip: IpAddr,
}

impl StreamBudget {
    /// A budget of `max` streams, `max_per_ip` from one address, each open for at most
    /// `longest`; `gauge` shows the streams open.
    pub fn new(max: usize, max_per_ip: u32, longest: Duration, gauge: prometheus::IntGauge) -> Arc<Self> {
        Arc::new(StreamBudget { max, longest, max_per_ip, open: AtomicUsize::new(0), per_ip: DashMap::new(), gauge })
    }

    /// Longest a stream stays open (`event-stream-seconds`).
    pub fn longest(&self) -> Duration {
        self.longest
    }

    /// Streams open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Client addresses with a stream open now.
    pub fn addresses(&self) -> usize {
        self.per_ip.len()
    }

    /// A slot for a stream from `ip`, unless the edge or the address is full.
    pub fn take(self: &Arc<Self>, ip: IpAddr) -> Result<StreamSlot, Full> {
        if self.open.fetch_add(1, Ordering::Relaxed) >= self.max {
            self.open.fetch_sub(1, Ordering::Relaxed);
            return Err(Full::Edge);
        }
        let mut n = self.per_ip.entry(ip).or_insert(0);
        if *n >= self.max_per_ip {
            drop(n);
            self.open.fetch_sub(1, Ordering::Relaxed);
            return Err(Full::Address);
        }
        *n += 1;
        self.gauge.inc();
        Ok(StreamSlot { budget: Arc::clone(self), ip })
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.budget.per_ip.remove_if_mut(&self.ip, |_, n| {
            *n -= 1;
            *n == 0
        });
        self.budget.open.fetch_sub(1, Ordering::Relaxed);
        self.budget.gauge.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gauge() -> prometheus::IntGauge {
        prometheus::IntGauge::new("open", "open").unwrap()
    }

    /// Frames on the runtime's paused clock: a place far from the front (2,000 ahead at 1/s) is
    /// sent one at its poll interval, capped at 15 s (told 30 s there, jittered ±20%); the place
    /// at the front's door (nobody ahead) gets one about every second.
    #[tokio::test(start_paused = true)]
    async fn a_far_place_is_sent_fewer_frames_than_one_near_the_front() {
        let rooms = crate::room::tests::rooms_with("release = { mode = \"fixed\", rate = 0.0 }");
        let room = rooms.get("r1").unwrap();
        let mut tickets = Vec::new();
        for i in 0..2001 {
            let dev = format!("dev-{i}");
            tickets.push((dev.clone(), rooms.join(&room, &dev, &dev).await.unwrap()));
        }
        room.set_measured_rate(1.0);
        room.set_release_rate(1.0);
        let gaps = |(dev, t): &(String, QueueTicket)| {
            let (rooms, room, dev, t) = (&rooms, Arc::clone(&room), dev.clone(), t.clone());
            async move {
                let mut frames = EventFrames::new(room, t, &dev, Duration::from_secs(600));
                frames.next(rooms).await.expect("a first frame");
                let mut gaps = Vec::new();
                for _ in 0..4 {
                    let at = tokio::time::Instant::now();
                    frames.next(rooms).await.expect("a frame");
                    gaps.push(at.elapsed());
                }
                gaps
            }
        };
        let far = gaps(&tickets[2000]).await;
        assert!(far.iter().all(|g| *g >= Duration::from_secs(14) && *g <= Duration::from_secs(16)), "{far:?}");
        let near = gaps(&tickets[0]).await;
        assert!(near.iter().all(|g| *g <= Duration::from_secs(2)), "{near:?}");
    }

    /// A release step wakes the streams of places near the front at once (issue #39: a round of
    /// the last tickets waited up to a second for the fan's next look), not those far back. On
    /// the paused clock a stream that waited for its one-second look would miss the 100-ms
    /// deadline; the step that does not reach a place, and a look with nothing new, send nothing.
    #[tokio::test(start_paused = true)]
    async fn a_step_reaches_the_streams_near_the_front_at_once() {
        let rooms = crate::room::tests::rooms_with("release = { mode = \"fixed\", rate = 2.0 }");
        let room = rooms.get("r1").unwrap();
        let mut tickets = Vec::new();
        for i in 0..60 {
            let dev = format!("dev-{i}");
            tickets.push((dev.clone(), rooms.join(&room, &dev, &dev).await.unwrap()));
        }
        room.set_measured_rate(2.0);
        let open = |i: usize| {
            let (dev, t) = &tickets[i];
            EventFrames::new(Arc::clone(&room), t.clone(), dev, Duration::from_secs(600))
        };
        let (mut second, mut third, mut far) = (open(1), open(2), open(59));
        for f in [&mut second, &mut third, &mut far] {
            assert!(f.next(&rooms).await.expect("a first frame").contains("\"state\":\"waiting\""));
        }
        let soon = Duration::from_millis(100);
        // A second's step: two let in.
        rooms.tick_room(&room, crate::room::unix_ms()).await.unwrap();
        assert_eq!(room.state.counters().serving, 2);
        let frame = tokio::time::timeout(soon, second.next(&rooms)).await.expect("woken by the step").expect("a frame");
        assert!(frame.contains("\"state\":\"admitted\""), "{frame}");
        // The third place was woken too, looked, and had nothing new to say: it waits on.
        assert!(tokio::time::timeout(soon, third.next(&rooms)).await.is_err());
        assert!(tokio::time::timeout(soon, far.next(&rooms)).await.is_err(), "a place 30 s back is not woken");
        // The next step reaches the third place, which is waiting for the front again.
        rooms.tick_room(&room, crate::room::unix_ms() + 1000).await.unwrap();
        let frame = tokio::time::timeout(soon, third.next(&rooms)).await.expect("woken by the step").expect("a frame");
        assert!(frame.contains("\"state\":\"admitted\""), "{frame}");
    }

    #[test]
    fn the_budget_counts_streams_in_all_and_per_address_and_gives_slots_back() {
        let b = StreamBudget::new(3, 2, Duration::from_secs(9), gauge());
        let (a, c) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let a1 = b.take(a).unwrap();
        let a2 = b.take(a).unwrap();
        assert_eq!(b.take(a).err(), Some(Full::Address));
        let c1 = b.take(c).unwrap();
        assert_eq!(b.take(c).err(), Some(Full::Edge));
        assert_eq!((b.open(), b.addresses()), (3, 2));
        drop(a1);
        let c2 = b.take(c).unwrap();
        assert_eq!(b.take(a).err(), Some(Full::Edge));
        drop((a2, c1, c2));
        assert_eq!((b.open(), b.addresses(), b.gauge.get()), (0, 0, 0), "every slot given back, no address left behind");
    }

    #[test]
    fn slots_taken_and_given_back_from_many_threads_balance() {
        let b = StreamBudget::new(1_000_000, 1_000_000, Duration::from_secs(9), gauge());
        std::thread::scope(|s| {
            for t in 0..8u8 {
                let b = &b;
                s.spawn(move || {
                    for i in 0..5_000u32 {
                        let ip = IpAddr::from([10, t, (i % 7) as u8, 1]);
                        let slot = b.take(ip).unwrap();
                        if i % 3 == 0 {
                            // A second stream from the address, given back at once.
                            assert!(b.take(ip).is_ok());
                        }
                        drop(slot);
                    }
                });
            }
        });
        assert_eq!((b.open(), b.addresses()), (0, 0));
    }
}
