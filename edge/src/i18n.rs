//! Fan-facing text in five languages (zh-CN, zh-TW, en, ja, ko) from one message catalogue per
//! language (`static/i18n/<lang>.json`, compiled in). The server-rendered pages (the queue page,
//! the HTML refusals of [`crate::reject`]) and `static/queue.js` (which is handed the page's
//! catalogue inside the page) use the same keys, so a fan sees one wording with or without
//! JavaScript.
//!
//! Values may hold `{name}` placeholders; every catalogue has exactly the keys and placeholders
//! of `en.json` (a unit test checks it, and operator overrides are checked the same way at start).
//!
//! The language of a request: `?lang=` (which the queue page then saves in the `wicket_lang`
//! cookie), else that cookie, else the best `Accept-Language` match by q-value (`zh-TW`, `zh-HK`,
//! `zh-MO` and `zh-Hant` read Traditional, any other `zh` Simplified), else English.

use std::collections::BTreeMap;
use std::sync::LazyLock;

/// A language a fan may read the pages in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Lang {
    /// English (the fallback).
    En,
    /// Simplified Chinese.
    ZhCn,
    /// Traditional Chinese.
    ZhTw,
    /// Japanese.
    Ja,
    /// Korean.
    Ko,
}

/// Cookie that keeps a fan's explicit language choice.
pub const LANG_COOKIE: &str = "wicket_lang";

impl Lang {
    /// Every language, in the order the switcher lists them.
    pub const ALL: [Lang; 5] = [Lang::ZhCn, Lang::ZhTw, Lang::En, Lang::Ja, Lang::Ko];

    /// BCP 47 tag (the catalogue's file name, `<html lang>`, `?lang=`).
    pub fn tag(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::ZhCn => "zh-CN",
            Lang::ZhTw => "zh-TW",
            Lang::Ja => "ja",
            Lang::Ko => "ko",
        }
    }

    /// One of [`Lang::ALL`]'s tags, case-insensitively; `None` for anything else.
    pub fn from_tag(tag: &str) -> Option<Lang> {
        Lang::ALL.into_iter().find(|l| l.tag().eq_ignore_ascii_case(tag.trim()))
    }

    /// The language a language range of `Accept-Language` asks for, if one of ours.
    fn from_range(range: &str) -> Option<Lang> {
        let r = range.trim().to_ascii_lowercase();
        let primary = r.split(['-', '_']).next().unwrap_or("");
        match primary {
            "zh" => {
                let traditional = r.split(['-', '_']).skip(1).any(|s| matches!(s, "tw" | "hk" | "mo" | "hant"));
                Some(if traditional { Lang::ZhTw } else { Lang::ZhCn })
            }
            "en" => Some(Lang::En),
            "ja" => Some(Lang::Ja),
            "ko" => Some(Lang::Ko),
            _ => None,
        }
    }

    /// The catalogue's text for `key` (empty for an unknown key, which the tests rule out).
    pub fn text(self, key: &str) -> &'static str {
        CATALOGUES.get(&self).and_then(|c| c.get(key)).map_or("", String::as_str)
    }

    /// The catalogue text for `key` with its `{name}` placeholders filled in.
    pub fn fill(self, key: &str, args: &[(&str, &str)]) -> String {
        fill(self.text(key), args)
    }

    /// A whole number with thousands separators (every language here groups by three with `,`).
    pub fn number(self, n: u64) -> String {
        let digits = n.to_string();
        let mut out = String::with_capacity(digits.len() + digits.len() / 3);
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        out
    }
}

/// Where text comes from: the built-in catalogue of a language ([`Lang`]), or that catalogue with
/// an operator's overrides (the queue page's).
pub trait Words {
    /// The language.
    fn lang(&self) -> Lang;
    /// The text for `key`.
    fn text(&self, key: &str) -> &str;
    /// The text for `key` with its `{name}` placeholders filled in.
    fn fill(&self, key: &str, args: &[(&str, &str)]) -> String {
        fill(self.text(key), args)
    }
}

impl Words for Lang {
    fn lang(&self) -> Lang {
        *self
    }
    fn text(&self, key: &str) -> &str {
        Lang::text(*self, key)
    }
}

/// The compiled-in catalogues, by language.
pub const CATALOGUE_SOURCES: [(Lang, &str); 5] = [
    (Lang::En, include_str!("../../static/i18n/en.json")),
    (Lang::ZhCn, include_str!("../../static/i18n/zh-CN.json")),
    (Lang::ZhTw, include_str!("../../static/i18n/zh-TW.json")),
    (Lang::Ja, include_str!("../../static/i18n/ja.json")),
    (Lang::Ko, include_str!("../../static/i18n/ko.json")),
];

/// A catalogue: key → text.
pub type Catalogue = BTreeMap<String, String>;

static CATALOGUES: LazyLock<BTreeMap<Lang, Catalogue>> = LazyLock::new(|| {
    CATALOGUE_SOURCES
        .iter()
        .map(|(l, src)| (*l, serde_json::from_str(src).unwrap_or_else(|e| panic!("static/i18n/{}.json: {e}", l.tag()))))
        .collect()
});

/// The built-in catalogue of `lang`.
pub fn catalogue(lang: Lang) -> &'static Catalogue {
    &CATALOGUES[&lang]
}

/// `{name}` placeholders of a text, sorted, each once.
pub fn placeholders(text: &str) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find('{') {
        let after = &rest[start + 1..];
        let Some(end) = after.find('}') else { break };
        let name = &after[..end];
        if !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c == '_') && !out.contains(&name) {
            out.push(name);
        }
        rest = &after[end + 1..];
    }
    out.sort_unstable();
    out
}

/// `text` with each `{name}` of `args` replaced.
pub fn fill(text: &str, args: &[(&str, &str)]) -> String {
    let mut out = text.to_owned();
    for (k, v) in args {
        out = out.replace(&format!("{{{k}}}"), v);
    }
    out
}

/// The language of a request: `?lang=`, the saved choice, `Accept-Language`, English.
pub fn choose(query_lang: Option<&str>, saved: Option<&str>, accept_language: Option<&str>) -> Lang {
    if let Some(l) = query_lang.and_then(Lang::from_tag).or_else(|| saved.and_then(Lang::from_tag)) {
        return l;
    }
    accept_language.and_then(from_accept_language).unwrap_or(Lang::En)
}

/// The best of our languages in an `Accept-Language` value: highest q first, then the order
/// given; `q=0` means "not this one".
pub fn from_accept_language(value: &str) -> Option<Lang> {
    let mut best: Option<(f32, Lang)> = None;
    for item in value.split(',') {
        let mut parts = item.split(';');
        let range = parts.next().unwrap_or("");
        let q = parts
            .filter_map(|p| p.trim().strip_prefix("q=").or_else(|| p.trim().strip_prefix("Q=")))
            .find_map(|q| q.trim().parse::<f32>().ok())
            .unwrap_or(1.0);
        if q.is_nan() || q <= 0.0 {
            continue;
        }
        if let Some(l) = Lang::from_range(range)
            && best.is_none_or(|(bq, _)| q > bq)
        {
            best = Some((q, l));
        }
    }
    best.map(|(_, l)| l)
}

/// The `?lang=` value of a query string.
pub fn query_lang(query: Option<&str>) -> Option<&str> {
    query?.split('&').find_map(|p| p.strip_prefix("lang="))
}

/// How fast people are let in, in words a fan believes: below one a second it says "one person
/// every N seconds" (never "about 0 people a second"). Empty when nobody is let in.
pub fn rate_text(lang: &impl Words, per_second: f64) -> String {
    if !per_second.is_finite() || per_second <= 0.0 {
        return String::new();
    }
    if per_second >= 1.5 {
        return lang.fill("rate_many", &[("n", &lang.lang().number(per_second.round() as u64))]);
    }
    if per_second >= 0.75 {
        return lang.text("rate_one").to_owned();
    }
    let every = 1.0 / per_second;
    if every < 10.0 {
        lang.fill("rate_every_seconds", &[("s", &(every.round() as u64).max(2).to_string())])
    } else if every < 90.0 {
        lang.fill("rate_every_seconds", &[("s", &(((every / 5.0).round() * 5.0) as u64).to_string())])
    } else {
        lang.fill("rate_every_minutes", &[("m", &((every / 60.0).round() as u64).max(2).to_string())])
    }
}

/// The wait as a band in minutes or hours, from the status's `eta_seconds` (low, high).
pub fn eta_text(lang: &impl Words, eta: Option<(u64, u64)>) -> String {
    let Some((lo, hi)) = eta else { return lang.text("eta_unknown").to_owned() };
    let hi = hi.max(lo);
    if hi < 60 {
        return lang.text("eta_soon").to_owned();
    }
    let (one, many, range, a, b) = if hi < 90 * 60 {
        let a = (lo / 60).max(1);
        ("eta_minute", "eta_minutes", "eta_minutes_range", a, hi.div_ceil(60).max(a))
    } else {
        let a = (lo / 3600).max(1);
        ("eta_hour", "eta_hours", "eta_hours_range", a, hi.div_ceil(3600).max(a))
    };
    match (a, b) {
        (1, 1) => lang.text(one).to_owned(),
        (a, b) if a == b => lang.fill(many, &[("a", &a.to_string())]),
        (a, b) => lang.fill(range, &[("a", &a.to_string()), ("b", &b.to_string())]),
    }
}

/// Time left until opening as `[N d ]HH:MM:SS` (the same as queue.js counts down).
pub fn countdown_text(lang: &impl Words, seconds: u64) -> String {
    let (d, rest) = (seconds / 86_400, seconds % 86_400);
    let time = format!("{:02}:{:02}:{:02}", rest / 3600, rest % 3600 / 60, rest % 60);
    if d == 0 { time } else { lang.fill("countdown_days", &[("d", &d.to_string()), ("time", &time)]) }
}

/// Escapes text for HTML element content and quoted attribute values.
pub fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_catalogue_has_the_keys_and_placeholders_of_english() {
        let en = catalogue(Lang::En);
        assert!(en.len() > 50);
        for lang in Lang::ALL {
            let c = catalogue(lang);
            let missing: Vec<_> = en.keys().filter(|k| !c.contains_key(*k)).collect();
            let extra: Vec<_> = c.keys().filter(|k| !en.contains_key(*k)).collect();
            assert!(missing.is_empty() && extra.is_empty(), "{}: missing {missing:?}, extra {extra:?}", lang.tag());
            for (k, v) in en {
                assert_eq!(placeholders(&c[k]), placeholders(v), "{}: placeholders of {k}", lang.tag());
                assert!(!c[k].trim().is_empty(), "{}: {k} is empty", lang.tag());
            }
        }
    }

    #[test]
    fn language_choice_follows_query_then_cookie_then_accept_language_q_values() {
        assert_eq!(choose(Some("ja"), Some("ko"), Some("zh-CN")), Lang::Ja);
        assert_eq!(choose(Some("xx"), Some("ko"), Some("zh-CN")), Lang::Ko);
        assert_eq!(choose(None, None, Some("zh-CN,zh;q=0.9,en;q=0.8")), Lang::ZhCn);
        assert_eq!(choose(None, None, Some("zh-TW")), Lang::ZhTw);
        assert_eq!(choose(None, None, Some("zh-HK,en;q=0.5")), Lang::ZhTw);
        assert_eq!(choose(None, None, Some("zh-Hant-TW")), Lang::ZhTw);
        assert_eq!(choose(None, None, Some("zh-Hans-SG")), Lang::ZhCn);
        assert_eq!(choose(None, None, Some("zh")), Lang::ZhCn);
        assert_eq!(choose(None, None, Some("fr-FR,ja;q=0.3,ko;q=0.7")), Lang::Ko);
        assert_eq!(choose(None, None, Some("en;q=0.2, ko-KR")), Lang::Ko);
        assert_eq!(choose(None, None, Some("ja;q=0,de")), Lang::En);
        assert_eq!(choose(None, None, Some("de-DE")), Lang::En);
        assert_eq!(choose(None, None, None), Lang::En);
        assert_eq!(query_lang(Some("a=1&lang=zh-TW")), Some("zh-TW"));
        // Hostile values: only our five tags are ever chosen; anything else falls through to English.
        let huge = format!("{},ja;q=0.1", "x-".repeat(50_000));
        assert_eq!(choose(Some("<script>"), Some("../../etc/passwd"), Some(&huge)), Lang::Ja);
        assert_eq!(choose(Some("zh%2DTW"), Some("ja\r\nSet-Cookie: x"), Some("ko;q=NaN, de")), Lang::En);
        assert_eq!(choose(None, None, Some(";;;,,,q=1,")), Lang::En);
    }

    #[test]
    fn slow_rates_are_said_honestly() {
        assert_eq!(rate_text(&Lang::En, 0.2), "Letting in about one person every 5 seconds");
        assert_eq!(rate_text(&Lang::En, 0.05), "Letting in about one person every 20 seconds");
        assert_eq!(rate_text(&Lang::En, 0.005), "Letting in about one person every 3 minutes");
        assert_eq!(rate_text(&Lang::En, 0.9), "Letting in about one person a second");
        assert_eq!(rate_text(&Lang::En, 1234.4), "Letting in about 1,234 people a second");
        assert_eq!(rate_text(&Lang::ZhCn, 0.2), "当前约每 5 秒放行 1 人");
        assert_eq!(rate_text(&Lang::En, 0.0), "");
        for r in [0.01, 0.1, 0.2, 0.5, 0.7, 1.0, 1.4, 2.0] {
            for l in Lang::ALL {
                let t = rate_text(&l, r);
                assert!(!t.contains(" 0 ") && !t.contains('{'), "{r} {}: {t}", l.tag());
            }
        }
    }

    #[test]
    fn eta_bands_and_countdown() {
        assert_eq!(eta_text(&Lang::En, None), "estimating…");
        assert_eq!(eta_text(&Lang::En, Some((10, 40))), "less than a minute");
        assert_eq!(eta_text(&Lang::En, Some((50, 70))), "about 1–2 minutes");
        assert_eq!(eta_text(&Lang::En, Some((60, 60))), "about 1 minute");
        assert_eq!(eta_text(&Lang::En, Some((7200, 10_000))), "about 2–3 hours");
        assert_eq!(eta_text(&Lang::Ja, Some((300, 300))), "約5分");
        assert_eq!(countdown_text(&Lang::En, 3725), "01:02:05");
        assert_eq!(countdown_text(&Lang::ZhCn, 86_400 + 5), "1 天 00:00:05");
        assert_eq!(Lang::En.number(1_234_567), "1,234,567");
        assert_eq!(Lang::En.number(12), "12");
    }

    /// static/queue.js words the figures as the server does (run with node when it is installed).
    #[test]
    fn queue_js_words_figures_as_the_server_does() {
        let Ok(out) = std::process::Command::new("node").arg("--version").output() else {
            eprintln!("node not installed: skipped");
            return;
        };
        assert!(out.status.success());
        let rates = [0.004, 0.02, 0.05, 0.2, 0.3, 0.5, 0.8, 1.0, 1.6, 2.4, 1234.4];
        let etas = [(10, 40), (50, 70), (60, 60), (300, 300), (400, 900), (5000, 6000), (7200, 10_000)];
        let countdowns = [0, 59, 3725, 86_400 + 5, 3 * 86_400 + 7200];
        let script = format!(
            "const q = require({js:?}); const out = {{}};\n\
             for (const tag of {tags:?}) {{\n\
               const T = JSON.parse(require('fs').readFileSync({dir:?} + '/' + tag + '.json', 'utf8'));\n\
               out[tag] = [{rates:?}.map(r => q.rateText(T, r)), {etas_js:?}.map(([a, b]) => q.etaText(T, {{low: a, high: b}})),\n\
                           {countdowns:?}.map(s => q.countdownText(T, s)), [q.etaText(T, null)]];\n\
             }}\n\
             process.stdout.write(JSON.stringify(out));",
            js = concat!(env!("CARGO_MANIFEST_DIR"), "/../static/queue.js"),
            dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../static/i18n"),
            tags = Lang::ALL.map(Lang::tag),
            etas_js = etas.map(|(a, b)| [a, b]),
        );
        let out = std::process::Command::new("node").arg("-e").arg(script).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let js: BTreeMap<String, Vec<Vec<String>>> = serde_json::from_slice(&out.stdout).unwrap();
        for lang in Lang::ALL {
            let rust = vec![
                rates.iter().map(|r| rate_text(&lang, *r)).collect::<Vec<_>>(),
                etas.iter().map(|e| eta_text(&lang, Some(*e))).collect(),
                countdowns.iter().map(|s| countdown_text(&lang, *s)).collect(),
                vec![eta_text(&lang, None)],
            ];
            assert_eq!(js[lang.tag()], rust, "{}", lang.tag());
        }
    }
}
