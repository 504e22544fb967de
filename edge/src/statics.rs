//! Static files served from memory, CDN-style.
//!
//! Everything is prepared at start: the body in identity, gzip and brotli encodings (kept only
//! when they save at least 10%), a strong ETag per encoding, and every header value. Serving is a
//! hash lookup by `&str`, an `If-None-Match` and `Accept-Encoding` scan over the request's bytes,
//! and reference-count bumps: nothing on the hot path allocates except Pingora's own header map.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use http::HeaderValue;
use sha2::{Digest, Sha256};

/// Files bigger than this are not loaded (the edge is for pages, not downloads).
pub const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Precomputed response heads of one variant (for the fast path, [`crate::front::http1`]).
#[derive(Debug, Clone, Default)]
pub struct WireHeads {
    /// `HTTP/1.1 200 OK` and every header but `Date`, ending with `Date: `.
    pub ok: Bytes,
    /// The same for 304.
    pub not_modified: Bytes,
}

impl WireHeads {
    /// Builds the heads of `variant` of `asset`.
    pub fn new(content_type: &HeaderValue, cache_control: &HeaderValue, varies: bool, variant: &Variant, encoding: Encoding) -> Self {
        let mut common = Vec::with_capacity(256);
        let mut line = |k: &str, v: &[u8]| {
            common.extend_from_slice(k.as_bytes());
            common.extend_from_slice(b": ");
            common.extend_from_slice(v);
            common.extend_from_slice(b"\r\n");
        };
        line("ETag", variant.etag.as_bytes());
        line("Cache-Control", cache_control.as_bytes());
        if varies {
            line("Vary", b"accept-encoding");
        }
        let mut ok = b"HTTP/1.1 200 OK\r\n".to_vec();
        ok.extend_from_slice(&common);
        let mut extra = Vec::new();
        let mut line2 = |k: &str, v: &[u8]| {
            extra.extend_from_slice(k.as_bytes());
            extra.extend_from_slice(b": ");
            extra.extend_from_slice(v);
            extra.extend_from_slice(b"\r\n");
        };
        line2("Content-Type", content_type.as_bytes());
        line2("Content-Length", variant.length.as_bytes());
        match encoding {
            Encoding::Identity => {}
            Encoding::Gzip => line2("Content-Encoding", b"gzip"),
            Encoding::Brotli => line2("Content-Encoding", b"br"),
        }
        ok.extend_from_slice(&extra);
        ok.extend_from_slice(b"Date: ");
        let mut nm = b"HTTP/1.1 304 Not Modified\r\n".to_vec();
        nm.extend_from_slice(&common);
        nm.extend_from_slice(b"Date: ");
        WireHeads { ok: Bytes::from(ok), not_modified: Bytes::from(nm) }
    }
}

/// One encoding of a file.
#[derive(Debug, Clone)]
pub struct Variant {
    /// The bytes sent.
    pub body: Bytes,
    /// Strong ETag, quoted.
    pub etag: HeaderValue,
    /// `Content-Length` value.
    pub length: HeaderValue,
    /// The whole response head up to `Date: `, for the fast path.
    pub wire: WireHeads,
}

/// A file ready to serve.
#[derive(Debug, Clone)]
pub struct Asset {
    /// `Content-Type`.
    pub content_type: HeaderValue,
    /// `Cache-Control`.
    pub cache_control: HeaderValue,
    /// Uncompressed.
    pub identity: Variant,
    /// gzip, if it pays.
    pub gzip: Option<Variant>,
    /// brotli, if it pays.
    pub br: Option<Variant>,
}

/// Which encoding was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// None.
    Identity,
    /// gzip.
    Gzip,
    /// br.
    Brotli,
}

impl Asset {
    /// The best variant the client accepts: br, then gzip, then identity.
    pub fn choose(&self, accept_encoding: &[u8]) -> (Encoding, &Variant) {
        if let Some(v) = &self.br
            && accepts(accept_encoding, b"br")
        {
            return (Encoding::Brotli, v);
        }
        if let Some(v) = &self.gzip
            && accepts(accept_encoding, b"gzip")
        {
            return (Encoding::Gzip, v);
        }
        (Encoding::Identity, &self.identity)
    }

    /// Whether the asset has more than one encoding (so responses carry `Vary`).
    pub fn varies(&self) -> bool {
        self.gzip.is_some() || self.br.is_some()
    }
}

/// Whether `Accept-Encoding` lists `coding` with a non-zero q (a bare `*` counts too).
pub fn accepts(header: &[u8], coding: &[u8]) -> bool {
    let mut star = false;
    for item in header.split(|&b| b == b',') {
        let mut parts = item.split(|&b| b == b';');
        let name = trim(parts.next().unwrap_or_default());
        let zero = parts.any(|p| {
            let p = trim(p);
            p.len() >= 2 && p[..2].eq_ignore_ascii_case(b"q=") && trim(&p[2..]).iter().all(|&c| c == b'0' || c == b'.')
        });
        if name.eq_ignore_ascii_case(coding) {
            return !zero;
        }
        if name == b"*" && !zero {
            star = true;
        }
    }
    star
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// Whether `If-None-Match` matches `etag` (weak comparison, as RFC 9110 asks for this header).
pub fn none_match(header: &[u8], etag: &[u8]) -> bool {
    header.split(|&b| b == b',').any(|t| {
        let t = trim(t);
        let t = t.strip_prefix(b"W/").unwrap_or(t);
        t == b"*" || t == etag
    })
}

/// The content type for a file name.
pub fn content_type(path: &str) -> &'static str {
    let ext = path.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase()).unwrap_or_default();
    match ext.as_str() {
        "html" | "htm" => "text/html; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "json" | "map" => "application/json",
        "txt" => "text/plain; charset=utf-8",
        "xml" => "application/xml",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "avif" => "image/avif",
        "ico" => "image/x-icon",
        "woff2" => "font/woff2",
        "woff" => "font/woff",
        "wasm" => "application/wasm",
        "webmanifest" => "application/manifest+json",
        _ => "application/octet-stream",
    }
}

fn compressible(ct: &str) -> bool {
    ct.starts_with("text/")
        || ct.starts_with("application/json")
        || ct.starts_with("application/xml")
        || ct.starts_with("application/manifest")
        || ct.starts_with("image/svg")
        || ct == "application/wasm"
}

fn variant(body: Bytes, etag: String) -> Variant {
    Variant {
        length: HeaderValue::from(body.len()),
        wire: WireHeads::default(),
        etag: HeaderValue::from_str(&etag).expect("hex etag is a valid header value"),
        body,
    }
}

/// Prepares one file.
pub fn prepare(name: &str, data: Vec<u8>, cache_control: &str) -> Asset {
    let ct = content_type(name);
    let hash = hex::encode(&Sha256::digest(&data)[..12]);
    let data = Bytes::from(data);
    let (mut gzip, mut br) = (None, None);
    if compressible(ct) && data.len() > 256 {
        let keep = |c: &[u8]| c.len() * 10 < data.len() * 9;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        if gz.write_all(&data).is_ok()
            && let Ok(c) = gz.finish()
            && keep(&c)
        {
            gzip = Some(variant(Bytes::from(c), format!("\"{hash}-gz\"")));
        }
        let mut out = Vec::new();
        let params = brotli::enc::BrotliEncoderParams { quality: 11, lgwin: 22, ..Default::default() };
        if brotli::BrotliCompress(&mut &data[..], &mut out, &params).is_ok() && keep(&out) {
            br = Some(variant(Bytes::from(out), format!("\"{hash}-br\"")));
        }
    }
    let mut asset = Asset {
        content_type: HeaderValue::from_static(ct),
        cache_control: HeaderValue::from_str(cache_control).unwrap_or(HeaderValue::from_static("no-cache")),
        identity: variant(data, format!("\"{hash}\"")),
        gzip,
        br,
    };
    let (ct, cc, varies) = (asset.content_type.clone(), asset.cache_control.clone(), asset.varies());
    asset.identity.wire = WireHeads::new(&ct, &cc, varies, &asset.identity, Encoding::Identity);
    if let Some(v) = asset.gzip.as_mut() {
        v.wire = WireHeads::new(&ct, &cc, varies, v, Encoding::Gzip);
    }
    if let Some(v) = asset.br.as_mut() {
        v.wire = WireHeads::new(&ct, &cc, varies, v, Encoding::Brotli);
    }
    asset
}

/// Every static file by URL path.
#[derive(Debug, Default)]
pub struct StaticSite {
    assets: HashMap<Box<str>, Arc<Asset>>,
}

impl StaticSite {
    /// An empty site.
    pub fn new() -> Self {
        Self::default()
    }

    /// The asset at a URL path.
    pub fn get(&self, path: &str) -> Option<&Arc<Asset>> {
        self.assets.get(path)
    }

    /// Number of URL paths served.
    pub fn len(&self) -> usize {
        self.assets.len()
    }

    /// Whether nothing is served.
    pub fn is_empty(&self) -> bool {
        self.assets.is_empty()
    }

    /// Size of the largest body of any file in any encoding.
    pub fn largest_body(&self) -> usize {
        self.assets.values().map(|a| a.identity.body.len()).max().unwrap_or(0)
    }

    /// URL paths served, sorted.
    pub fn paths(&self) -> Vec<String> {
        let mut v: Vec<String> = self.assets.keys().map(|k| k.to_string()).collect();
        v.sort();
        v
    }

    /// Adds one asset at `url`.
    pub fn insert(&mut self, url: &str, asset: Asset) {
        self.assets.insert(url.into(), Arc::new(asset));
    }

    /// Loads every file under `dir` (recursively, skipping dot files) at `prefix` + relative
    /// path; `index.html` is also served at its folder's path. `cache_control(url)` gives each
    /// file's `Cache-Control`.
    pub fn load_dir(
        &mut self,
        dir: &Path,
        prefix: &str,
        cache_control: &dyn Fn(&str) -> String,
    ) -> std::io::Result<usize> {
        let mut count = 0;
        let mut stack = vec![(dir.to_path_buf(), prefix.trim_end_matches('/').to_owned())];
        while let Some((folder, url_base)) = stack.pop() {
            for entry in std::fs::read_dir(&folder)? {
                let entry = entry?;
                let name = entry.file_name();
                let Some(name) = name.to_str() else { continue };
                if name.starts_with('.') {
                    continue;
                }
                let ft = entry.file_type()?;
                let url = format!("{url_base}/{name}");
                if ft.is_dir() {
                    stack.push((entry.path(), url));
                } else if ft.is_file() && entry.metadata()?.len() <= MAX_FILE_BYTES {
                    let data = std::fs::read(entry.path())?;
                    let asset = prepare(name, data, &cache_control(&url));
                    if name == "index.html" {
                        self.insert(&format!("{url_base}/"), asset.clone());
                    }
                    self.insert(&url, asset);
                    count += 1;
                }
            }
        }
        Ok(count)
    }
}

/// The answer to a `GET` or `HEAD` of a file from memory: 200 or 304, no body for HEAD and 304,
/// `Content-Length` always. The proxy and the HTTP/2 fast path ([`crate::front::h2`]) both answer
/// with it; the HTTP/1.1 fast path writes the same from precomputed bytes.
pub fn static_response(asset: &Asset, req: &pingora::http::RequestHeader) -> pingora::Result<(pingora::http::ResponseHeader, Option<bytes::Bytes>, crate::metrics::Outcome)> {
    let ae = req.headers.get(http::header::ACCEPT_ENCODING).map_or(&b""[..], |v| v.as_bytes());
    let (encoding, variant) = asset.choose(ae);
    let not_modified = req.headers.get(http::header::IF_NONE_MATCH).is_some_and(|inm| none_match(inm.as_bytes(), variant.etag.as_bytes()));
    let mut h = pingora::http::ResponseHeader::build_no_case(if not_modified { 304 } else { 200 }, Some(8))?;
    h.insert_header(http::header::ETAG, variant.etag.clone())?;
    h.insert_header(http::header::CACHE_CONTROL, asset.cache_control.clone())?;
    if asset.varies() {
        h.insert_header(http::header::VARY, http::HeaderValue::from_static("accept-encoding"))?;
    }
    if not_modified {
        return Ok((h, None, crate::metrics::Outcome::NotModified));
    }
    h.insert_header(http::header::CONTENT_TYPE, asset.content_type.clone())?;
    h.insert_header(http::header::CONTENT_LENGTH, variant.length.clone())?;
    match encoding {
        Encoding::Identity => {}
        Encoding::Gzip => h.insert_header(http::header::CONTENT_ENCODING, http::HeaderValue::from_static("gzip"))?,
        Encoding::Brotli => h.insert_header(http::header::CONTENT_ENCODING, http::HeaderValue::from_static("br"))?,
    }
    let body = (req.method != http::Method::HEAD).then(|| variant.body.clone());
    Ok((h, body, crate::metrics::Outcome::Ok))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_encoding_honours_q_zero_and_star() {
        assert!(accepts(b"gzip, deflate, br", b"br"));
        assert!(accepts(b"gzip;q=0.5", b"gzip"));
        assert!(!accepts(b"gzip;q=0", b"gzip"));
        assert!(!accepts(b"br;q=0.0, gzip", b"br"));
        assert!(accepts(b"*", b"br"));
        assert!(!accepts(b"identity", b"gzip"));
        assert!(!accepts(b"", b"gzip"));
    }

    #[test]
    fn if_none_match_is_a_weak_list_comparison() {
        assert!(none_match(b"\"a\", W/\"b\"", b"\"b\""));
        assert!(none_match(b"*", b"\"b\""));
        assert!(!none_match(b"\"a\"", b"\"b\""));
    }

    #[test]
    fn compressed_variants_have_their_own_etags() {
        let a = prepare("x.html", "<p>hello</p>".repeat(100).into_bytes(), "public");
        let gz = a.gzip.as_ref().unwrap();
        let br = a.br.as_ref().unwrap();
        assert_ne!(gz.etag, a.identity.etag);
        assert_ne!(br.etag, gz.etag);
        assert_eq!(a.choose(b"gzip, br").0, Encoding::Brotli);
        assert_eq!(a.choose(b"gzip").0, Encoding::Gzip);
        assert_eq!(a.choose(b"").0, Encoding::Identity);
        let png = prepare("x.png", vec![0; 1000], "public");
        assert!(png.gzip.is_none());
    }
}
