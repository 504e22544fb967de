//! The post-sale report of a room (docs/src/api.md "Room report"), served on the admin port:
//! `GET /admin/rooms/<room>/report` (JSON, or CSV with `?format=csv` / `Accept: text/csv`), an
//! optional `from` / `to` (RFC 3339, whole minutes) range ([`handle`]). What is counted and where
//! it is kept: [`super::tally`]. Here too: the hooks the rest of the room calls (a session's first
//! use, a refusal on a room's paths) and the leader's figures of a tick.

use std::sync::atomic::Ordering;

use http::Response;
use serde_json::{Value, json};

use super::state::Who;
use super::tally::{Count, GAUGES, minute_of, MAX_ROWS, MinuteRecord, REASONS, TOO_MANY, WAIT_BOUNDS, WAIT_BUCKETS, wait_quantile};
use super::{Room, Rooms, rfc3339};
use crate::admin_reply::{error, json_response};

impl Room {
    /// The leader's figures of this tick for the report: rate set and measured (× 1000), the
    /// P99 the controller saw and its target (µs), sold out (0/1).
    pub fn report_gauges(&self) -> Vec<(&'static str, u64)> {
        let p99 = self.last_input.lock().and_then(|i| i.p99_ms);
        let mut g = vec![
            (GAUGES[0], (self.release_rate() * 1000.0).round() as u64),
            (GAUGES[1], (self.measured_rate() * 1000.0).round() as u64),
            (GAUGES[3], (self.spec().config.release.p99_target_ms * 1000.0).round() as u64),
            (GAUGES[4], u64::from(self.sold_out.load(Ordering::Relaxed))),
        ];
        if let Some(p) = p99 {
            g.push((GAUGES[2], (p * 1000.0).round() as u64));
        }
        g
    }
}

impl Rooms {
    /// A session of `room` was used (a protected path, a core request with its token): counted
    /// as a hold the first time (once per session over every edge). This edge asks the store
    /// once per session while it remembers the session ([`Room::touched_recently`]'s map).
    pub async fn note_use(&self, room: &Room, who: Who, now_ms: u64) {
        if room.use_noted(who) {
            return;
        }
        let session_ms = room.spec().config.session_seconds * 1000;
        match room.report.store.first_use_known(who, now_ms, session_ms, room.state.session_until(who)).await {
            Ok(first) => {
                room.mark_use_noted(who);
                if let Some(admitted_ms) = first {
                    room.report.tally.count(now_ms, Count::Holds, 1);
                    room.report.tally.count_in(now_ms, minute_of(admitted_ms), Count::HeldOfAdmitted, 1);
                }
            }
            Err(e) => tracing::debug!(room = %room.id, "report: session use: {e}"),
        }
    }

    /// A refusal of a request for `path`, counted in the report of the room the path belongs to
    /// (its `/queue/<room>/…` paths and its protected paths); other paths count in none.
    pub fn count_refusal(&self, path: &str, reason: &str) {
        // (No allocation: a refusal flood costs a table lookup and an atomic add per request.)
        let room = match path.strip_prefix(super::QUEUE_PREFIX) {
            Some(rest) => self.get(rest.split('/').next().unwrap_or(rest)),
            None => {
                let table = self.protection();
                table.find(path).and_then(|p| self.get(&p.rule.room))
            }
        };
        if let Some(room) = room {
            room.report.tally.refused(super::unix_ms(), reason);
        }
    }
}

/// The room of a report path: `/admin/rooms/<room>/report`.
pub fn report_room(path: &str) -> Option<&str> {
    path.strip_prefix("/admin/rooms/")?.strip_suffix("/report").filter(|id| !id.is_empty() && !id.contains('/'))
}

/// What a report request asks.
#[derive(Debug, PartialEq, Eq)]
pub struct Ask {
    /// CSV (else JSON).
    pub csv: bool,
    /// First minute (Unix s of its start), when given.
    pub from: Option<i64>,
    /// Last minute, when given.
    pub to: Option<i64>,
}

/// Reads the query (`format`, `from`, `to`) and `Accept`; the refusal's message when bad.
pub fn parse_ask(query: Option<&str>, accept: Option<&str>) -> Result<Ask, String> {
    let mut ask = Ask { csv: accept.is_some_and(|a| a.split(',').any(|t| t.trim().starts_with("text/csv"))), from: None, to: None };
    let mut seen = Vec::new();
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let v = unescape(v).ok_or_else(|| format!("{k}: a bad %-escape"))?;
        if seen.contains(&k) {
            return Err(format!("{k} is given twice"));
        }
        seen.push(k);
        match k {
            "format" => match v.as_str() {
                "json" => ask.csv = false,
                "csv" => ask.csv = true,
                _ => return Err(format!("format must be json or csv, not {v:?}")),
            },
            "from" | "to" => {
                let t = super::config::parse_time(&v).ok_or_else(|| format!("{k} must be an RFC 3339 time (2026-12-01T20:00:00Z), not {v:?}"))?;
                if t < 0 {
                    return Err(format!("{k} is before 1970"));
                }
                if k == "from" {
                    ask.from = Some(t);
                } else {
                    ask.to = Some(t);
                }
            }
            _ => return Err(format!("unknown parameter {k:?}: format, from and to are known")),
        }
    }
    if let (Some(f), Some(t)) = (ask.from, ask.to)
        && f > t
    {
        return Err("from is after to".into());
    }
    Ok(ask)
}

/// A query value with its `%XX` escapes decoded (`+` stays `+`: an RFC 3339 offset); `None` for
/// a bad escape or one that is not UTF-8.
fn unescape(v: &str) -> Option<String> {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// `GET /admin/rooms/<room>/report` (the caller checked the token).
pub async fn handle(rooms: &Rooms, method: &http::Method, id: &str, query: Option<&str>, accept: Option<&str>) -> Response<Vec<u8>> {
    let Some(room) = rooms.get(id) else { return error(404, "not_found", format!("no room {id:?}")) };
    if method != http::Method::GET {
        return error(405, "bad_request", "GET only");
    }
    let ask = match parse_ask(query, accept) {
        Ok(a) => a,
        Err(m) => return error(400, "bad_request", m),
    };
    let from = ask.from.map_or(0, |s| s as u64 / 60);
    let to = ask.to.map_or(u64::MAX / 2, |s| s as u64 / 60);
    if to - from >= MAX_ROWS as u64 && ask.from.is_some() && ask.to.is_some() {
        return error(400, "bad_request", TOO_MANY);
    }
    let (rows, sold_out_at) = match room.report.store.read(from, to).await {
        Ok(r) => r,
        Err(e) if e.0 == TOO_MANY => return error(400, "bad_request", TOO_MANY),
        Err(e) => return error(503, "unavailable", format!("the room store did not answer: {e}")),
    };
    if rows.len() > MAX_ROWS {
        return error(400, "bad_request", TOO_MANY);
    }
    let report = build(&room, &ask, &rows, sold_out_at);
    if ask.csv {
        let body = csv(&rows).into_bytes();
        return Response::builder()
            .status(200)
            .header(http::header::CONTENT_TYPE, "text/csv; charset=utf-8")
            .header(http::header::CONTENT_DISPOSITION, format!("attachment; filename=\"{}-report.csv\"", room.id))
            .header(http::header::CONTENT_LENGTH, body.len())
            .header(http::header::CACHE_CONTROL, "no-store")
            .body(body)
            .unwrap_or_else(|_| Response::new(Vec::new()));
    }
    json_response(200, &report)
}

fn minute_time(m: u64) -> Option<String> {
    rfc3339((m * 60) as i64)
}

fn histogram(r: &MinuteRecord) -> Vec<u64> {
    (0..WAIT_BUCKETS).map(|i| r.get(&format!("wait:{i}")).copied().unwrap_or(0)).collect()
}

fn get(r: &MinuteRecord, f: &str) -> u64 {
    r.get(f).copied().unwrap_or(0)
}

fn milli(r: &MinuteRecord, f: &str) -> Option<f64> {
    r.get(f).map(|v| *v as f64 / 1000.0)
}

fn waits(h: &[u64]) -> Value {
    json!({"p50": wait_quantile(h, 0.5), "p90": wait_quantile(h, 0.9), "p99": wait_quantile(h, 0.99)})
}

fn refusals(r: &MinuteRecord) -> serde_json::Map<String, Value> {
    REASONS.iter().map(|k| ((*k).to_owned(), get(r, &format!("refused:{k}")).into())).collect()
}

/// A minute's drop-offs, by cohort ([`super::tally`]): its admissions never used, its released
/// places whose fan never came.
fn drop_off_counts(r: &MinuteRecord) -> (u64, u64) {
    (get(r, "admissions").saturating_sub(get(r, "held_of_admitted")), get(r, "released").saturating_sub(get(r, "admitted_of_released")))
}

fn drop_offs(r: &MinuteRecord) -> Value {
    let (unused, abandoned) = drop_off_counts(r);
    json!({"unused": unused, "abandoned": abandoned})
}

/// The JSON report.
fn build(room: &Room, ask: &Ask, rows: &[(u64, MinuteRecord)], sold_out_at: Option<u64>) -> Value {
    let mut total = MinuteRecord::new();
    for (_, r) in rows {
        for (k, v) in r {
            if !GAUGES.contains(&k.as_str()) {
                *total.entry(k.clone()).or_default() += v;
            }
        }
    }
    let minutes: Vec<Value> = rows
        .iter()
        .map(|(m, r)| {
            let h = histogram(r);
            json!({
                "minute": minute_time(*m),
                "joins": get(r, "joins"),
                "admissions": get(r, "admissions"),
                "holds": get(r, "holds"),
                "released": get(r, "released"),
                "held_of_admitted": get(r, "held_of_admitted"),
                "admitted_of_released": get(r, "admitted_of_released"),
                "drop_offs": drop_offs(r),
                "refusals": refusals(r),
                "wait_histogram": h,
                "wait_seconds": waits(&h),
                "rate_set": milli(r, "rate_set_milli"),
                "rate_measured": milli(r, "rate_measured_milli"),
                "p99_ms": milli(r, "p99_us"),
                "p99_target_ms": milli(r, "p99_target_us"),
                "sold_out": r.get("sold_out").map(|v| *v == 1),
            })
        })
        .collect();
    let h = histogram(&total);
    // The totals' drop-offs are the sums of the minutes' (each minute's cohort, never below 0).
    let (unused, abandoned) = rows.iter().fold((0, 0), |(u, a), (_, r)| {
        let d = drop_off_counts(r);
        (u + d.0, a + d.1)
    });
    json!({
        "room": room.id,
        "event": room.spec().config.event,
        "store": room.report.store.kind(),
        "from": ask.from.map(|s| s as u64 / 60).or(rows.first().map(|r| r.0)).and_then(minute_time),
        "to": ask.to.map(|s| s as u64 / 60).or(rows.last().map(|r| r.0)).and_then(minute_time),
        "wait_bounds_seconds": WAIT_BOUNDS,
        "totals": {
            "joins": get(&total, "joins"),
            "admissions": get(&total, "admissions"),
            "holds": get(&total, "holds"),
            "released": get(&total, "released"),
            "held_of_admitted": get(&total, "held_of_admitted"),
            "admitted_of_released": get(&total, "admitted_of_released"),
            "drop_offs": {"unused": unused, "abandoned": abandoned},
            "refusals": refusals(&total),
            "wait_histogram": h,
            "wait_seconds": waits(&h),
            "sold_out_at": sold_out_at.and_then(|ms| rfc3339((ms / 1000) as i64)),
        },
        "minutes": minutes,
    })
}

/// The refusal reasons of the first CSV release, in their columns before the waits; the later
/// ones come last ([`csv`]).
const CSV_FIRST_REASONS: usize = 8;

/// The CSV report: a header, then one row a minute. Columns are only ever appended (a script
/// that reads them by position keeps working): the first release's, then the drop-offs and the
/// refusal reasons added since.
fn csv(rows: &[(u64, MinuteRecord)]) -> String {
    let mut out = String::from("minute,joins,admissions,holds,released");
    let (first, later) = REASONS.split_at(CSV_FIRST_REASONS);
    for r in first {
        out.push_str(&format!(",refused_{r}"));
    }
    out.push_str(",wait_p50_s,wait_p90_s,wait_p99_s,rate_set,rate_measured,p99_ms,p99_target_ms,sold_out");
    out.push_str(",unused,abandoned,held_of_admitted,admitted_of_released");
    for r in later {
        out.push_str(&format!(",refused_{r}"));
    }
    out.push('\n');
    let opt = |v: Option<String>| v.unwrap_or_default();
    for (m, r) in rows {
        let h = histogram(r);
        out.push_str(&format!("{},{},{},{},{}", opt(minute_time(*m)), get(r, "joins"), get(r, "admissions"), get(r, "holds"), get(r, "released")));
        for reason in first {
            out.push_str(&format!(",{}", get(r, &format!("refused:{reason}"))));
        }
        for q in [0.5, 0.9, 0.99] {
            out.push_str(&format!(",{}", opt(wait_quantile(&h, q).map(|v| v.to_string()))));
        }
        for f in ["rate_set_milli", "rate_measured_milli", "p99_us", "p99_target_us"] {
            out.push_str(&format!(",{}", opt(milli(r, f).map(|v| v.to_string()))));
        }
        out.push_str(&format!(",{}", opt(r.get("sold_out").map(|v| v.to_string()))));
        let (unused, abandoned) = drop_off_counts(r);
        out.push_str(&format!(",{unused},{abandoned},{},{}", get(r, "held_of_admitted"), get(r, "admitted_of_released")));
        for reason in later {
            out.push_str(&format!(",{}", get(r, &format!("refused:{reason}"))));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_asks_are_read_strictly() {
        assert_eq!(parse_ask(None, None), Ok(Ask { csv: false, from: None, to: None }));
        assert_eq!(parse_ask(None, Some("text/csv")).map(|a| a.csv), Ok(true));
        assert_eq!(parse_ask(Some("format=json"), Some("text/csv")).map(|a| a.csv), Ok(false));
        let a = parse_ask(Some("from=2026-12-01T20:00:00Z&to=2026-12-01T21%3A00%3A00Z&format=csv"), None).unwrap();
        assert_eq!((a.csv, a.from, a.to), (true, Some(1_796_155_200), Some(1_796_158_800)));
        assert_eq!(parse_ask(Some("format=xml"), None), Err("format must be json or csv, not \"xml\"".into()));
        // Escapes: `%2B` and a raw `+` are the offset's sign; a broken escape is refused.
        let a = parse_ask(Some("from=2026-12-02T04%3A00%3A00%2B08%3A00&to=2026-12-02T05:00:00+08:00"), None).unwrap();
        assert_eq!((a.from, a.to), (Some(1_796_155_200), Some(1_796_158_800)));
        assert_eq!(parse_ask(Some("from=2026%2"), None), Err("from: a bad %-escape".into()));
        assert_eq!(parse_ask(Some("from=%FF"), None), Err("from: a bad %-escape".into()));
        assert_eq!(parse_ask(Some("from=2026-12-01T21:00:00Z&to=2026-12-01T20:00:00Z"), None), Err("from is after to".into()));
        assert_eq!(parse_ask(Some("form=csv"), None), Err("unknown parameter \"form\": format, from and to are known".into()));
        assert_eq!(parse_ask(Some("format=csv&format=json"), None), Err("format is given twice".into()));
        assert!(parse_ask(Some("from=yesterday"), None).unwrap_err().starts_with("from must be an RFC 3339 time"));
        assert_eq!(report_room("/admin/rooms/r1/report"), Some("r1"));
        assert_eq!(report_room("/admin/rooms//report"), None);
        assert_eq!(report_room("/admin/rooms/a/b/report"), None);
    }
}
