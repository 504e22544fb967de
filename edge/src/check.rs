//! What every config section's checks share: [`ConfigIssue`] (one problem with its path), and the
//! parsers of the values several sections hold (path prefixes, addresses, networks, URLs, room ids,
//! files relative to the config file).
//!
//! Each part of the edge owns its section of the config file and checks it (`limit`, `blocklist`,
//! `anomaly`, `bot`, `admission`, `tls`, `room`); [`crate::config`] composes them. This module
//! imports no part, so every part may use it without importing the config module back.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use ipnet::IpNet;
use serde::Serialize;
use wicket_core::problems;

/// One problem in a config file: where (`edge.limits[2].rate`) and what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConfigIssue {
    /// Dotted path of the offending key.
    pub path: String,
    /// What is wrong with it, in words an operator can act on.
    pub message: String,
}

impl std::fmt::Display for ConfigIssue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Every problem found in one file; displayed one per line.
#[derive(Debug, Clone, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigIssue>);

impl std::fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, issue) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{issue}")?;
        }
        Ok(())
    }
}

/// A [`ConfigIssue`] at `path`.
pub fn issue(path: impl Into<String>, message: impl Into<String>) -> ConfigIssue {
    ConfigIssue { path: path.into(), message: message.into() }
}

/// `p` from a config file, resolved against the file's folder `base` unless it is absolute.
pub fn resolve(base: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() { p.to_path_buf() } else { base.join(p) }
}

/// Adds the line and column of each issue's key in `text`, where the text holds it.
pub fn with_lines(text: &str, issues: Vec<ConfigIssue>) -> Vec<ConfigIssue> {
    let ps = issues.into_iter().map(|i| problems::Problem { path: i.path, message: i.message }).collect();
    problems::with_lines(text, ps).into_iter().map(|p| ConfigIssue { path: p.path, message: p.message }).collect()
}

/// Adds a problem at `path` when `p` is not a path prefix the edge can match ([`crate::path`]).
pub fn check_prefix(out: &mut Vec<ConfigIssue>, path: &str, p: &str) {
    if let Some(problem) = crate::path::prefix_problem(p) {
        out.push(issue(path, problem));
    }
}

/// Room ids appear in URLs and cookie names.
pub fn is_room_id(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// `"0.0.0.0:8080"` → a socket address.
pub fn parse_listen(s: &str) -> Option<SocketAddr> {
    s.parse().ok()
}

/// `"10.0.0.0/8"` or `"10.1.2.3"` → a network.
pub fn parse_net(s: &str) -> Option<IpNet> {
    let s = s.trim();
    s.parse::<IpNet>().ok().or_else(|| s.parse::<IpAddr>().ok().map(IpNet::from))
}

/// A parsed `http://host:port[/path]` URL.
#[derive(Debug, Clone)]
pub struct HttpUrl {
    /// `host:port` as written (the `Host` header).
    pub authority: String,
    /// Host part.
    pub host: String,
    /// Port (default 80).
    pub port: u16,
    /// Path and query, `/` when absent.
    pub path: String,
    /// `https://`: TLS, the certificate verified for `host`.
    pub tls: bool,
}

/// Parses `http://host[:port][/path]`; https is refused (the edge has no TLS client).
pub fn parse_http_url(s: &str) -> Result<HttpUrl, String> {
    let (tls, rest) = match (s.strip_prefix("http://"), s.strip_prefix("https://")) {
        (Some(rest), _) => (false, rest),
        (_, Some(rest)) => (true, rest),
        _ => return Err(format!("must start with http:// or https://: {s:?}")),
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if authority.is_empty() {
        return Err(format!("no host in {s:?}"));
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => match p.parse::<u16>() {
            Ok(port) => (h.trim_start_matches('[').trim_end_matches(']'), port),
            Err(_) => return Err(format!("bad port in {s:?}")),
        },
        _ => (authority, if tls { 443 } else { 80 }),
    };
    Ok(HttpUrl { authority: authority.to_owned(), host: host.to_owned(), port, path: path.to_owned(), tls })
}

/// An upstream: `http://host:port` whose host resolves now (the edge looks it up again while it runs:
/// [`crate::resolve`]).
pub fn parse_http_upstream(s: &str) -> Result<HttpUrl, String> {
    let url = parse_http_url(s)?;
    if url.path != "/" {
        return Err(format!("an upstream has no path: {s:?}"));
    }
    crate::resolve::Name::lookup(&url.host, url.port).map_err(|e| format!("{e} ({s:?})"))?;
    Ok(url)
}
