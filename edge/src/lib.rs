//! # Wicket edge
//!
//! The front door of a flash sale: static pages from memory, limits, bot checks, admission
//! tokens on protected paths, and proxying of the rest to the core or the existing site. Built
//! on Pingora; the binary `wicket` (src/main.rs) only parses arguments and calls [`server::run`].
//!
//! # Layout
//!
//! - [`config`]: the TOML file (`[edge]`, `[tokens]`, `[[rooms]]`), defaults, `validate()`: it
//!   composes the sections each part owns (`limit::LimitRule`, `blocklist::BlocklistConfig`,
//!   `anomaly::AnomalyConfig`, `geoip::GeoIpConfig`, `bot::BotConfig`,
//!   `admission::{ProtectedRule, TokensConfig}`, `tls::TlsConfig`, `room::page::QueuePageConfig`,
//!   `room::RoomsConfig`), each with its own checks.
//! - [`check`]: what those checks share: `ConfigIssue` (a problem with its path), path prefixes,
//!   addresses, URLs, room ids. No part imports [`config`]; tests/structure.rs reads the `use`
//!   lines and `crate::` paths of every file here and fails on an import circle.
//! - [`state`]: everything the services share, built once from a validated config; only the
//!   services take it whole (the decision step, the doors, the admin service, the server): the
//!   parts get handles (`EdgeState::queue_edge` for the waiting room's endpoints).
//! - [`body`]: the request bodies the edge answers itself, read within `max-body-bytes` and the
//!   client-side deadlines (`Timeouts`).
//! - [`resolve`]: the core's and the origin's names, looked up again every `resolve-every-ms` and after
//!   a failed connect, so a moved name is followed without a restart.
//! - [`server`]: the Pingora server (public, admin, name-following and upkeep services), graceful stop, the
//!   embedded core; one `listening on` log line per listener (the log format is
//!   `wicket_core::logging`'s, chosen by `edge.log-format`).
//! - [`statics`]: files preloaded with ETags and gzip/brotli variants.
//! - [`replay`]: bytes put back in front of a stream, for handing a request to the proxy (on plain
//!   HTTP with its writes gathered until a flush); HTTP/2's gathered writes.
//! - [`tls`]: `[edge.tls]`: the HTTPS listener's certificates (SNI, reload), handshake and stream (rustls);
//!   `tls::tickets`: session tickets every edge can open (keys derived from shared files per 6-hour period).
//!   `tls::send_only`: an HTTPS/1.1 event stream after its head, rustls shed, its frames sealed with the
//!   connection's keys by the stream itself.
//! - [`front`]: the public listeners and their doors, side by side (none imports another;
//!   tests/structure.rs): the listener's TLS handshake and dispatch (`front`), what a
//!   connection's doors share (`front::conn`: settings, HSTS, the hand-over, the wait for a
//!   connection's next request and the parking of an idle one), the HTTP/1.1 door
//!   [`front::http1`] (the head read and checked; files, status polls, refusals written on the
//!   connection) with its forwarded path to a plain-HTTP origin [`front::forward`], the HTTP/2
//!   door [`front::h2`] (Pingora's connection, the same answers per stream, the rest handed on
//!   within the connection's upstream slots: [`cancel`]), and Pingora's proxy [`front::proxy`]
//!   (the `ProxyHttp` phases, the door of what the others hand over and of nginx's `/wicket/auth`,
//!   `/wicket/revoke` and `/wicket/sessions`, the report of nginx-compat's OpenResty path).
//! - [`path`]: the one canonical request path and the one set of head rules (every door uses them).
//! - [`identity`]: client IP behind trusted proxies, user id, signed device id.
//! - [`limit`]: nginx `limit_req` semantics on governor; `[[edge.limits]]`.
//! - [`blocklist`], [`anomaly`]: who is refused, and rules that block for a while; `[edge.blocklist]`,
//!   `[edge.anomaly]`.
//! - [`geoip`]: `[edge.geoip]`: the operator's MaxMind databases (reloaded on SIGHUP), rules by
//!   country and network (block, challenge, limit) and the regional anomaly rule (a region's share
//!   of arrivals jumping above its baseline), with bounded per-region metrics.
//! - [`bot`]: proof-of-work, CAPTCHA siteverify, bot passes, run-time policy; `[edge.bot]`.
//! - [`admission`]: the protected-path hook (admission-token JWT check); `[[edge.protected]]`,
//!   `[tokens]`.
//! - [`room`]: the waiting room: queue tickets, status, admission tokens, sessions, the release
//!   loop, room admin API (with the page preview), the post-sale report (`room::report`), the
//!   server-rendered queue page (`room::page`, `[edge.queue-page]`), the room modes (reject-all,
//!   queuing status code, test mode with its signed tester cookie, `room::tester`), the invite lane
//!   of presales and invite-only rooms, with its share of each release (`room::invite`,
//!   `[rooms.invite]`; the lane's counters in `room::state`);
//!   room state embedded or in Redis (`room::redis`, the top-level `store`; rooms and operator
//!   overrides made on one edge are applied by every edge sharing it). It owns `/queue/`
//!   (`room::QUEUE_PREFIX`) and reads `[[rooms]]` through `room::RoomsConfig`.
//! - [`controller`]: the release controller (session budget from core P99, errors, utilisation),
//!   re-exported from the `wicket-controller` crate.
//! - [`reject`]: the one mapping from a refusal to a JSON or HTML answer (pages in the fan's
//!   language).
//! - [`i18n`]: the message catalogues (static/i18n/: 17 languages, ar, de, en, es, fa, fr, id,
//!   it, ja, ko, nl, pl, pt-BR, ru, tr, zh-CN, zh-TW; ar and fa right to left), the choice of
//!   language (`?lang=`, the `wicket_lang` cookie, `Accept-Language`), CLDR plural forms and number
//!   grouping, shared by the server-rendered pages and queue.js.
//! - [`admin`]: the admin port (bearer token, or a console session with its CSRF token);
//!   [`admin_reply`]: the JSON answers and token comparison its handlers share.
//! - [`decide`]: the one decision step: a request (its door, method, canonical path, head, peer)
//!   in, a `Decision` out (a file, a status poll, the room, the bot endpoints, a refusal, a pass to
//!   the core or origin, or — for a fast door — hand over to the proxy); the only place that knows
//!   the order of the checks. Every door carries its decisions out (tests/structure.rs fails when
//!   a door calls a check itself; tests/doors.rs sends one table through all five doors).
//! - [`console`]: the operator console: its page and files (static/console/, gzipped), browser
//!   sessions, the sign-in lock-out per client address.
//! - [`demo`]: `wicket demo` (edge + embedded core + a stand-in site with a buy page and a stand-in
//!   payment provider; its secrets in a private temp folder removed on exit).
//! - [`metrics`]: Prometheus metrics of the edge (the rooms' `wicket_room_*` gauges are the release
//!   loop's, in `room::release`); deploy/ (alert rules, Grafana dashboard) is built on both.
//! - [`nginx_import`]: `wicket nginx-import`, nginx `limit_req` zones as `[[edge.limits]]`.
//! - [`reference`]: `wicket config-reference`, the configuration reference (docs/src/reference/)
//!   generated from the config types' schemas (`schemars`: doc comments, serde names, defaults).
//!
//! # The path of a request
//!
//! The listener (`front`) hands a connection to its door. `front::http1` reads every request
//! head first (within `header-timeout-ms` and 32 KiB),
//! refuses malformed or ambiguous ones ([`path`]), and asks [`decide`] about a simple, canonically
//! spelled one as the HTTP/1.1 door: files, status polls of queued visitors, refusals and plain
//! origin requests are carried out on the connection (over HTTP/2, `front::h2` does the same per
//! stream as the HTTP/2 door). Everything a fast door cannot carry out is handed over before any
//! check counts it, to the proxy, whose `request_filter` rewrites the target to its canonical path
//! (what every decision and the upstream see) and asks [`decide`] as the proxy door (or, for
//! nginx's `/wicket/auth`, about the original request). The decision runs, in one order: client IP
//! (`identity`), IP blocklist (`blocklist`), the client's region with its GeoIP block and limits
//! (`geoip`), unprotected files after the limits (`limit`), user and device, the user/device blocklist and anomaly rule (`anomaly`), the limits, the rooms'
//! paths, the bot endpoints and the route's bot check (`bot`), the core's public routes, and on
//! protected paths the admission check (`admission`) with its session; refusals are counted there
//! and rendered by `reject`. What remains goes to the core (core prefixes) or the origin, with
//! verified `Wicket-*` identity headers; upstream failures become 502/504 pages in `fail_to_proxy`.

pub mod admin;
pub mod admin_reply;
pub mod admission;
pub mod anomaly;
pub mod blocklist;
pub mod body;
pub mod bot;
pub mod cancel;
pub mod check;
pub mod config;
pub mod console;
pub mod decide;
/// The release controller lives in its own crate (no Pingora, no tokio): `wicket-controller`.
pub use wicket_controller as controller;
pub mod demo;
pub mod front;
pub mod geoip;
pub mod i18n;
pub mod identity;
pub mod limit;
pub mod metrics;
pub mod nginx_import;
pub mod path;
pub mod reference;
pub mod reject;
pub mod replay;
pub mod resolve;
pub mod room;
pub mod server;
pub mod state;
pub mod statics;
pub mod tls;

pub use config::WicketConfig;
pub use server::run;
