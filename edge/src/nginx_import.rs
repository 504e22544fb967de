//! `wicket nginx-import FILE`: nginx's `limit_req_zone` / `limit_req` as `[[edge.limits]]`.
//!
//! The config is read the way nginx reads it (directives end with `;`, blocks in braces, `#`
//! comments, single and double quotes, `include` with globs relative to the including file),
//! and every `limit_req` is turned into a rule on the path of its `location` (prefix locations;
//! `http`/`server` level is `/`), with the zone's key mapped to the edge's:
//! `$binary_remote_addr` / `$remote_addr` → `ip`; `$http_<name>` matching `user-header` or
//! `$cookie_<name>` matching `user-cookie` → `user`; `$cookie_wicket_d` → `device`. The rate,
//! `burst`, `nodelay` and `delay=` carry over unchanged (the edge's limits have nginx's
//! semantics, [`crate::limit`]).
//!
//! What cannot be carried over exactly is listed with its file and line: regex and exact-match
//! locations, other keys, undefined zones, and nginx's inheritance rule (a location with its own
//! `limit_req` does not inherit the server's, while the edge applies every rule whose prefix
//! matches).

use std::path::{Path, PathBuf};

use crate::limit::{LimitKey, LimitRule};

/// One token of an nginx config, with where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Token {
    text: String,
    /// `{`, `}` or `;` (never quoted).
    punct: bool,
    file: PathBuf,
    line: usize,
}

/// A directive: its words, where it is, and its block's directives.
#[derive(Debug, Clone)]
struct Directive {
    words: Vec<String>,
    file: PathBuf,
    line: usize,
    block: Option<Vec<Directive>>,
}

/// What the import found: rules, and everything that could not be carried over exactly.
#[derive(Debug, Default)]
pub struct Import {
    /// The rules, in the order of the config.
    pub rules: Vec<LimitRule>,
    /// `file:line: what`, one per problem.
    pub left_out: Vec<String>,
}

impl Import {
    /// The rules as TOML (`[[edge.limits]]` tables) with a header comment.
    pub fn toml(&self, source: &Path) -> String {
        let mut out = format!("# Imported from {} by `wicket nginx-import`.\n", source.display());
        for r in &self.rules {
            let key = match r.key {
                LimitKey::Ip => "ip",
                LimitKey::User => "user",
                LimitKey::Device => "device",
            };
            out.push_str(&format!("\n[[edge.limits]]\npath = {:?}\nkey = \"{key}\"\nrate = {:?}\nburst = {}\n", r.path, r.rate, r.burst));
            if r.nodelay {
                out.push_str("nodelay = true\n");
            }
            if let Some(d) = r.delay {
                out.push_str(&format!("delay = {d}\n"));
            }
        }
        out
    }
}

fn tokenize(text: &str, file: &Path) -> Result<Vec<Token>, String> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    let mut line = 1;
    let mut word = String::new();
    let mut word_line = 1;
    let flush = |word: &mut String, out: &mut Vec<Token>, line: usize| {
        if !word.is_empty() {
            out.push(Token { text: std::mem::take(word), punct: false, file: file.to_owned(), line });
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\n' => {
                flush(&mut word, &mut out, word_line);
                line += 1;
            }
            c if c.is_whitespace() => flush(&mut word, &mut out, word_line),
            '#' if word.is_empty() => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        line += 1;
                        break;
                    }
                }
            }
            '{' | '}' | ';' => {
                flush(&mut word, &mut out, word_line);
                out.push(Token { text: c.to_string(), punct: true, file: file.to_owned(), line });
            }
            '"' | '\'' if word.is_empty() => {
                let start = line;
                let mut closed = false;
                while let Some(q) = chars.next() {
                    if q == c {
                        closed = true;
                        break;
                    }
                    if q == '\\' {
                        if let Some(n) = chars.next() {
                            word.push(n);
                        }
                        continue;
                    }
                    if q == '\n' {
                        line += 1;
                    }
                    word.push(q);
                }
                if !closed {
                    return Err(format!("{}:{start}: unterminated quote", file.display()));
                }
                out.push(Token { text: std::mem::take(&mut word), punct: false, file: file.to_owned(), line: start });
            }
            c => {
                if word.is_empty() {
                    word_line = line;
                }
                word.push(c);
            }
        }
    }
    flush(&mut word, &mut out, word_line);
    Ok(out)
}

/// Reads a file into directives, following `include` (globs relative to the including file).
fn read(file: &Path, depth: usize) -> Result<Vec<Directive>, String> {
    if depth > 16 {
        return Err(format!("{}: includes nested too deep", file.display()));
    }
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let tokens = tokenize(&text, file)?;
    let mut pos = 0;
    let list = parse_block(&tokens, &mut pos, file, depth, false)?;
    Ok(list)
}

fn parse_block(tokens: &[Token], pos: &mut usize, file: &Path, depth: usize, nested: bool) -> Result<Vec<Directive>, String> {
    let mut out = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut line = 0;
    while let Some(t) = tokens.get(*pos) {
        *pos += 1;
        if !t.punct {
            if words.is_empty() {
                line = t.line;
            }
            words.push(t.text.clone());
            continue;
        }
        match t.text.as_str() {
            ";" => {
                if words.first().is_some_and(|w| w == "include") {
                    for pattern in &words[1..] {
                        for f in expand(file, pattern)? {
                            out.extend(read(&f, depth + 1)?);
                        }
                    }
                } else if !words.is_empty() {
                    out.push(Directive { words: std::mem::take(&mut words), file: file.to_owned(), line, block: None });
                }
                words.clear();
            }
            "{" => {
                let block = parse_block(tokens, pos, file, depth, true)?;
                out.push(Directive { words: std::mem::take(&mut words), file: file.to_owned(), line, block: Some(block) });
            }
            _ => {
                if !nested {
                    return Err(format!("{}:{}: unexpected '}}'", file.display(), t.line));
                }
                return Ok(out);
            }
        }
    }
    if nested {
        return Err(format!("{}: unexpected end of file (a block is not closed)", file.display()));
    }
    Ok(out)
}

/// The files an `include` names: relative to the including file's folder, `*` and `?` in the
/// last component.
fn expand(from: &Path, pattern: &str) -> Result<Vec<PathBuf>, String> {
    let p = Path::new(pattern);
    let p = if p.is_absolute() { p.to_owned() } else { from.parent().unwrap_or(Path::new(".")).join(p) };
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if !name.contains('*') && !name.contains('?') {
        return Ok(vec![p]);
    }
    let dir = p.parent().unwrap_or(Path::new("."));
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|f| f.file_name().and_then(|n| n.to_str()).is_some_and(|n| glob(name.as_bytes(), n.as_bytes())))
        .collect();
    found.sort();
    Ok(found)
}

fn glob(p: &[u8], s: &[u8]) -> bool {
    match (p.first(), s.first()) {
        (None, None) => true,
        (Some(b'*'), _) => glob(&p[1..], s) || (!s.is_empty() && glob(p, &s[1..])),
        (Some(b'?'), Some(_)) => glob(&p[1..], &s[1..]),
        (Some(a), Some(b)) if a == b => glob(&p[1..], &s[1..]),
        _ => false,
    }
}

/// A `limit_req_zone`: key and rate.
struct Zone {
    key: String,
    rate: String,
}

/// Which edge key a zone key maps to.
fn map_key(key: &str, user_header: Option<&str>, user_cookie: Option<&str>) -> Option<LimitKey> {
    let header_var = |h: &str| format!("$http_{}", h.to_ascii_lowercase().replace('-', "_"));
    match key {
        "$binary_remote_addr" | "$remote_addr" => Some(LimitKey::Ip),
        k if user_header.is_some_and(|h| k == header_var(h)) => Some(LimitKey::User),
        k if user_cookie.is_some_and(|c| k == format!("$cookie_{c}")) => Some(LimitKey::User),
        "$cookie_wicket_d" => Some(LimitKey::Device),
        _ => None,
    }
}

/// Imports `file`; `user_header` / `user_cookie` are the edge's, for `$http_*` / `$cookie_*` keys.
pub fn import(file: &Path, user_header: Option<&str>, user_cookie: Option<&str>) -> Result<Import, String> {
    let tree = read(file, 0)?;
    let mut zones = std::collections::HashMap::new();
    collect_zones(&tree, &mut zones);
    let mut out = Import::default();
    walk(&tree, "/", false, &zones, user_header, user_cookie, &mut out);
    Ok(out)
}

fn at(d: &Directive) -> String {
    format!("{}:{}", d.file.display(), d.line)
}

fn collect_zones(list: &[Directive], zones: &mut std::collections::HashMap<String, Zone>) {
    for d in list {
        if d.words.first().is_some_and(|w| w == "limit_req_zone") && d.words.len() >= 3 {
            let key = d.words[1].clone();
            let mut name = None;
            let mut rate = None;
            for w in &d.words[2..] {
                if let Some(z) = w.strip_prefix("zone=") {
                    name = z.split(':').next().map(str::to_owned);
                } else if let Some(r) = w.strip_prefix("rate=") {
                    rate = Some(r.to_owned());
                }
            }
            if let (Some(n), Some(r)) = (name, rate) {
                zones.insert(n, Zone { key, rate: r });
            }
        }
        if let Some(b) = &d.block {
            collect_zones(b, zones);
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn walk(
    list: &[Directive],
    path: &str,
    inherited: bool,
    zones: &std::collections::HashMap<String, Zone>,
    user_header: Option<&str>,
    user_cookie: Option<&str>,
    out: &mut Import,
) {
    let own = list.iter().any(|d| d.words.first().is_some_and(|w| w == "limit_req"));
    for d in list {
        let name = d.words.first().map(String::as_str).unwrap_or("");
        if name == "limit_req" {
            let mut zone = None;
            let (mut burst, mut nodelay, mut delay) = (0u32, false, None);
            let mut bad = None;
            for w in &d.words[1..] {
                if let Some(z) = w.strip_prefix("zone=") {
                    zone = Some(z.to_owned());
                } else if let Some(b) = w.strip_prefix("burst=") {
                    match b.parse() {
                        Ok(n) => burst = n,
                        Err(_) => bad = Some(format!("burst={b} is not a number")),
                    }
                } else if w == "nodelay" {
                    nodelay = true;
                } else if let Some(v) = w.strip_prefix("delay=") {
                    match v.parse() {
                        Ok(n) => delay = Some(n),
                        Err(_) => bad = Some(format!("delay={v} is not a number")),
                    }
                } else {
                    bad = Some(format!("unknown parameter {w}"));
                }
            }
            if let Some(b) = bad {
                out.left_out.push(format!("{}: limit_req: {b}", at(d)));
                continue;
            }
            let Some(zone) = zone else {
                out.left_out.push(format!("{}: limit_req without zone=", at(d)));
                continue;
            };
            let Some(z) = zones.get(&zone) else {
                out.left_out.push(format!("{}: limit_req zone={zone}: no limit_req_zone defines it", at(d)));
                continue;
            };
            let Some(key) = map_key(&z.key, user_header, user_cookie) else {
                out.left_out.push(format!(
                    "{}: limit_req zone={zone}: key {} has no edge equivalent (ip: $binary_remote_addr; user: the edge's user-header/user-cookie; device: $cookie_wicket_d)",
                    at(d),
                    z.key
                ));
                continue;
            };
            if crate::limit::NginxRate::parse(&z.rate).is_err() {
                out.left_out.push(format!("{}: limit_req zone={zone}: rate {} is not n r/s or n r/m", at(d), z.rate));
                continue;
            }
            if let Some(dl) = delay
                && (nodelay || dl > burst)
            {
                out.left_out.push(format!("{}: limit_req zone={zone}: delay={dl} with nodelay or over burst", at(d)));
                continue;
            }
            out.rules.push(LimitRule { path: path.to_owned(), key, rate: z.rate.clone(), burst, nodelay, delay, ipv6_prefix: None, ipv4_prefix: None });
        }
        let Some(block) = &d.block else { continue };
        match name {
            "http" | "server" => walk(block, path, own || inherited, zones, user_header, user_cookie, out),
            "location" => {
                let args = &d.words[1..];
                let location = match args {
                    [p] if p.starts_with('/') => Some(p.clone()),
                    [m, p] if m == "^~" && p.starts_with('/') => Some(p.clone()),
                    _ => None,
                };
                let has_limits = contains_limit_req(block);
                match location {
                    Some(p) => {
                        if has_limits && (own || inherited) {
                            out.left_out.push(format!(
                                "{}: location {p} has its own limit_req, so nginx does not apply the enclosing block's there; the edge applies every rule whose path matches (the enclosing rules also count under {p})",
                                at(d)
                            ));
                        }
                        walk(block, &p, own || inherited, zones, user_header, user_cookie, out);
                    }
                    None if has_limits => out.left_out.push(format!(
                        "{}: location {}: only prefix locations can be imported (regex and exact-match locations are left out)",
                        at(d),
                        args.join(" ")
                    )),
                    None => {}
                }
            }
            _ => walk(block, path, own || inherited, zones, user_header, user_cookie, out),
        }
    }
}

fn contains_limit_req(list: &[Directive]) -> bool {
    list.iter().any(|d| d.words.first().is_some_and(|w| w == "limit_req") || d.block.as_deref().is_some_and(contains_limit_req))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zones_locations_includes_and_what_is_left_out() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("conf.d")).unwrap();
        std::fs::write(
            dir.path().join("nginx.conf"),
            "events {}\nhttp {\n  # zones\n  limit_req_zone $binary_remote_addr zone=perip:10m rate=10r/s;\n\
             limit_req_zone \"$http_x_user_id\" zone=peruser:10m rate=30r/m;\n  limit_req_zone $request_uri zone=odd:1m rate=1r/s;\n\
             include conf.d/*.conf;\n}\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("conf.d/site.conf"),
            "server {\n  listen 80;\n  limit_req zone=perip burst=20 nodelay;\n\
             location /api/ { limit_req zone=peruser burst=5 delay=2; }\n\
             location ~ \\.php$ { limit_req zone=perip; }\n  location /x { limit_req zone=odd; limit_req zone=nope; }\n}\n",
        )
        .unwrap();
        let got = import(&dir.path().join("nginx.conf"), Some("X-User-Id"), None).unwrap();
        let rules: Vec<(String, LimitKey, String, u32, bool, Option<u32>)> =
            got.rules.iter().map(|r| (r.path.clone(), r.key, r.rate.clone(), r.burst, r.nodelay, r.delay)).collect();
        assert_eq!(
            rules,
            vec![
                ("/".into(), LimitKey::Ip, "10r/s".into(), 20, true, None),
                ("/api/".into(), LimitKey::User, "30r/m".into(), 5, false, Some(2)),
            ]
        );
        let text = got.left_out.join("\n");
        assert!(text.contains("site.conf:4") && text.contains("does not apply the enclosing"), "{text}");
        assert!(text.contains("site.conf:5") && text.contains("only prefix locations"), "{text}");
        assert!(text.contains("site.conf:6") && text.contains("$request_uri has no edge equivalent"), "{text}");
        assert!(text.contains("zone=nope: no limit_req_zone"), "{text}");
        let toml = got.toml(Path::new("nginx.conf"));
        let cfg = crate::config::WicketConfig::from_toml_str(&format!("[edge]\nuser-header = \"X-User-Id\"\n{}", toml)).unwrap();
        assert!(cfg.validate().is_empty(), "{:?}\n{toml}", cfg.validate());
        assert_eq!(cfg.edge.limits.len(), 2);
    }

    #[test]
    fn broken_configs_are_errors_with_their_place() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a.conf");
        std::fs::write(&f, "http {\n server {\n").unwrap();
        assert!(import(&f, None, None).unwrap_err().contains("not closed"));
        std::fs::write(&f, "http { }\n}\n").unwrap();
        assert!(import(&f, None, None).unwrap_err().contains("a.conf:2"));
        std::fs::write(&f, "http { limit_req_zone \"$x zone=a:1m rate=1r/s; }\n").unwrap();
        assert!(import(&f, None, None).unwrap_err().contains("unterminated quote"));
        assert!(import(&dir.path().join("missing.conf"), None, None).is_err());
    }
}
