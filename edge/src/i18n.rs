//! Fan-facing text in 17 languages (ar, de, en, es, fa, fr, id, it, ja, ko, nl, pl, pt-BR, ru,
//! tr, zh-CN, zh-TW: Cloudflare's default waiting-room set; Arabic and Persian are written right
//! to left and their pages carry `dir="rtl"`) from one message catalogue per language
//! (`static/i18n/<lang>.json`, compiled in). The server-rendered pages (the queue page, the HTML
//! refusals of [`crate::reject`]) and `static/queue.js` (which is handed the page's catalogue
//! inside the page) use the same keys, so a fan sees one wording with or without JavaScript.
//!
//! Values may hold `{name}` placeholders; every catalogue has exactly the keys and placeholders
//! of `en.json` (a unit test checks it, and operator overrides are checked the same way at start).
//! Texts that hold a count ([`COUNTED`]) may have plural variants `<key>#<category>`, chosen by
//! the CLDR plural category of the count ([`Lang::plural`]: one/few/many in Russian and Polish,
//! zero/one/two/few/many/other in Arabic, one/other or none elsewhere); the plain key is the
//! `other` form. Numbers keep Western digits in every language, grouped as the language does.
//!
//! The language of a request: `?lang=` (which the queue page then saves in the `wicket_lang`
//! cookie), else that cookie, else the best `Accept-Language` match by q-value, else English.
//! A regional tag reads its language (`pt`, `pt-PT`, `pt-BR` → pt-BR; `es-MX`, `es-419` → es;
//! `de-AT` → de; `fa-AF` → fa); `zh-TW`, `zh-HK`, `zh-MO` and `zh-Hant` read Traditional Chinese,
//! any other `zh` Simplified.

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
    /// Arabic (right to left).
    Ar,
    /// German.
    De,
    /// Spanish.
    Es,
    /// Persian (right to left).
    Fa,
    /// French.
    Fr,
    /// Indonesian.
    Id,
    /// Italian.
    It,
    /// Dutch.
    Nl,
    /// Polish.
    Pl,
    /// Brazilian Portuguese (every `pt` reads it).
    PtBr,
    /// Russian.
    Ru,
    /// Turkish.
    Tr,
}

/// Cookie that keeps a fan's explicit language choice.
pub const LANG_COOKIE: &str = "wicket_lang";

/// A CLDR plural category (<https://cldr.unicode.org/index/cldr-spec/plural-rules>).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Plural {
    /// `zero` (Arabic 0).
    Zero,
    /// `one`.
    One,
    /// `two` (Arabic 2).
    Two,
    /// `few` (Russian and Polish 2-4, 22-24, ...; Arabic 3-10, 103-110, ...).
    Few,
    /// `many` (Russian and Polish 5-20, 25-30, ...; Arabic 11-99, 111-199, ...).
    Many,
    /// `other`: the catalogue's plain key.
    Other,
}

impl Plural {
    /// The CLDR name, the suffix of a catalogue key's variant (`eta_minutes#few`).
    pub fn name(self) -> &'static str {
        match self {
            Plural::Zero => "zero",
            Plural::One => "one",
            Plural::Two => "two",
            Plural::Few => "few",
            Plural::Many => "many",
            Plural::Other => "other",
        }
    }
}

/// Catalogue keys whose text holds a count, with the placeholder that holds it (for a range, its
/// upper end, as CLDR's plural ranges choose in these languages). A language whose words change
/// with the count gives variants `<key>#<category>` (`eta_minutes#few`); a variant may leave out
/// the count (Arabic "دقيقتين", "two minutes"), but has every other placeholder of the key. The
/// plain key is the `other` form and the fallback for a category without a variant.
pub const COUNTED: [(&str, &str); 12] = [
    ("countdown_days", "d"),
    ("eta_minutes", "a"),
    ("eta_minutes_range", "b"),
    ("eta_hours", "a"),
    ("eta_hours_range", "b"),
    ("rate_many", "n"),
    ("rate_every_seconds", "s"),
    ("rate_every_minutes", "m"),
    ("pow_progress", "n"),
    ("announce_position", "ahead"),
    ("announce_tickets", "n"),
    ("noscript_note", "s"),
];

impl Lang {
    /// Every language, in the order the switcher lists them: by tag, which keeps each script
    /// together and reads the same in every language.
    pub const ALL: [Lang; 17] = [
        Lang::Ar,
        Lang::De,
        Lang::En,
        Lang::Es,
        Lang::Fa,
        Lang::Fr,
        Lang::Id,
        Lang::It,
        Lang::Ja,
        Lang::Ko,
        Lang::Nl,
        Lang::Pl,
        Lang::PtBr,
        Lang::Ru,
        Lang::Tr,
        Lang::ZhCn,
        Lang::ZhTw,
    ];

    /// BCP 47 tag (the catalogue's file name, `<html lang>`, `?lang=`).
    pub fn tag(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::ZhCn => "zh-CN",
            Lang::ZhTw => "zh-TW",
            Lang::Ja => "ja",
            Lang::Ko => "ko",
            Lang::Ar => "ar",
            Lang::De => "de",
            Lang::Es => "es",
            Lang::Fa => "fa",
            Lang::Fr => "fr",
            Lang::Id => "id",
            Lang::It => "it",
            Lang::Nl => "nl",
            Lang::Pl => "pl",
            Lang::PtBr => "pt-BR",
            Lang::Ru => "ru",
            Lang::Tr => "tr",
        }
    }

    /// The writing direction (`<html dir>`): `rtl` for Arabic and Persian, else `ltr`.
    pub fn dir(self) -> &'static str {
        if self.is_rtl() { "rtl" } else { "ltr" }
    }

    /// Whether the language is written right to left.
    pub fn is_rtl(self) -> bool {
        matches!(self, Lang::Ar | Lang::Fa)
    }

    /// A language tag of `?lang=` or the saved choice: one of [`Lang::ALL`]'s tags
    /// (case-insensitively), else a well-formed tag of a language we have (`pt`, `de-AT`,
    /// `zh-Hant` map as in `Accept-Language`); `None` for anything else.
    pub fn from_tag(tag: &str) -> Option<Lang> {
        let tag = tag.trim();
        if let Some(l) = Lang::ALL.into_iter().find(|l| l.tag().eq_ignore_ascii_case(tag)) {
            return Some(l);
        }
        let well_formed = !tag.is_empty() && tag.len() <= 35 && tag.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if well_formed { Lang::from_range(tag) } else { None }
    }

    /// The language a language range of `Accept-Language` asks for, if one of ours: the
    /// primary subtag decides (`pt`, `pt-PT`, `pt-BR` read Brazilian Portuguese; `es-MX` Spanish;
    /// `fa-AF` Persian; `in`, the old code, Indonesian), except Chinese, where `zh-TW`, `zh-HK`,
    /// `zh-MO` and `zh-Hant` read Traditional and any other `zh` Simplified.
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
            "ar" => Some(Lang::Ar),
            "de" => Some(Lang::De),
            "es" => Some(Lang::Es),
            "fa" => Some(Lang::Fa),
            "fr" => Some(Lang::Fr),
            "id" | "in" => Some(Lang::Id),
            "it" => Some(Lang::It),
            "nl" => Some(Lang::Nl),
            "pl" => Some(Lang::Pl),
            "pt" => Some(Lang::PtBr),
            "ru" => Some(Lang::Ru),
            "tr" => Some(Lang::Tr),
            _ => None,
        }
    }

    /// The CLDR plural category of a whole number `n` in this language (the counts on the
    /// pages are whole numbers, so the rules for fractions are left out).
    pub fn plural(self, n: u64) -> Plural {
        let (n10, n100) = (n % 10, n % 100);
        match self {
            Lang::Ja | Lang::Ko | Lang::ZhCn | Lang::ZhTw | Lang::Id => Plural::Other,
            Lang::En | Lang::De | Lang::Nl | Lang::It | Lang::Es | Lang::Tr => {
                if n == 1 { Plural::One } else { Plural::Other }
            }
            // French, Portuguese and Persian say the singular for 0 too.
            Lang::Fr | Lang::PtBr | Lang::Fa => {
                if n <= 1 { Plural::One } else { Plural::Other }
            }
            Lang::Ru => match (n10, n100) {
                (1, n100) if n100 != 11 => Plural::One,
                (2..=4, n100) if !(12..=14).contains(&n100) => Plural::Few,
                _ => Plural::Many,
            },
            Lang::Pl => match (n, n10, n100) {
                (1, _, _) => Plural::One,
                (_, 2..=4, n100) if !(12..=14).contains(&n100) => Plural::Few,
                _ => Plural::Many,
            },
            Lang::Ar => match (n, n100) {
                (0, _) => Plural::Zero,
                (1, _) => Plural::One,
                (2, _) => Plural::Two,
                (_, 3..=10) => Plural::Few,
                (_, 11..=99) => Plural::Many,
                _ => Plural::Other,
            },
        }
    }

    /// The plural categories whole numbers fall into in this language.
    pub fn plural_categories(self) -> &'static [Plural] {
        match self {
            Lang::Ja | Lang::Ko | Lang::ZhCn | Lang::ZhTw | Lang::Id => &[Plural::Other],
            Lang::Ru | Lang::Pl => &[Plural::One, Plural::Few, Plural::Many],
            Lang::Ar => &[Plural::Zero, Plural::One, Plural::Two, Plural::Few, Plural::Many, Plural::Other],
            _ => &[Plural::One, Plural::Other],
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

    /// A whole number in Western digits, grouped by three as the language does: `1,234` (and in
    /// Arabic and Persian, whose pages keep Western digits), `1.234` (de, es, id, it, nl, pt-BR,
    /// tr), `1 234` with a no-break space (fr with the narrow one, pl, ru); Spanish and Polish
    /// leave four digits ungrouped (`1234`, `12.345`), as CLDR says. queue.js does the same.
    pub fn number(self, n: u64) -> String {
        let (sep, min) = match self {
            Lang::De | Lang::Id | Lang::It | Lang::Nl | Lang::PtBr | Lang::Tr => ('.', 4),
            Lang::Es => ('.', 5),
            Lang::Fr => ('\u{202f}', 4),
            Lang::Ru => ('\u{a0}', 4),
            Lang::Pl => ('\u{a0}', 5),
            _ => (',', 4),
        };
        let digits = n.to_string();
        if digits.len() < min {
            return digits;
        }
        let mut out = String::with_capacity(digits.len() + digits.len() / 3 * 3);
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i) % 3 == 0 {
                out.push(sep);
            }
            out.push(c);
        }
        out
    }
}

/// The operator's branding of a page (`[edge.queue-page]`): the colours as a `<style>` of CSS
/// variables (`--accent`, `--accent-text`, `--bg`, `--card`, `--text`; empty: the built-in ones), the
/// logo's URL and the event's name.
#[derive(Debug, Clone, Copy, Default)]
pub struct Brand<'a> {
    /// `<style>:root{...}</style>` or empty.
    pub colours_css: &'a str,
    /// `logo-url`, checked at start (an http(s) URL or a path).
    pub logo_url: Option<&'a str>,
    /// `event-name`.
    pub event_name: Option<&'a str>,
}

/// Where text comes from: the built-in catalogue of a language ([`Lang`]), or that catalogue with
/// an operator's overrides (the queue page's).
pub trait Words {
    /// The language.
    fn lang(&self) -> Lang;
    /// The operator's branding of the pages written with these words (`[edge.queue-page]`):
    /// none for a bare catalogue.
    fn brand(&self) -> Brand<'_> {
        Brand::default()
    }
    /// The text for `key`.
    fn text(&self, key: &str) -> &str;
    /// The text for `key` with its `{name}` placeholders filled in.
    fn fill(&self, key: &str, args: &[(&str, &str)]) -> String {
        fill(self.text(key), args)
    }
    /// The text for `key` in the plural form for `count` (the variant `<key>#<category>` when
    /// the catalogue has one, else `key`), with its placeholders filled in.
    fn fill_count(&self, key: &str, count: u64, args: &[(&str, &str)]) -> String {
        let variant = self.text(&format!("{key}#{}", self.lang().plural(count).name()));
        fill(if variant.is_empty() { self.text(key) } else { variant }, args)
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
pub const CATALOGUE_SOURCES: [(Lang, &str); 17] = [
    (Lang::En, include_str!("../../static/i18n/en.json")),
    (Lang::ZhCn, include_str!("../../static/i18n/zh-CN.json")),
    (Lang::ZhTw, include_str!("../../static/i18n/zh-TW.json")),
    (Lang::Ja, include_str!("../../static/i18n/ja.json")),
    (Lang::Ko, include_str!("../../static/i18n/ko.json")),
    (Lang::Ar, include_str!("../../static/i18n/ar.json")),
    (Lang::De, include_str!("../../static/i18n/de.json")),
    (Lang::Es, include_str!("../../static/i18n/es.json")),
    (Lang::Fa, include_str!("../../static/i18n/fa.json")),
    (Lang::Fr, include_str!("../../static/i18n/fr.json")),
    (Lang::Id, include_str!("../../static/i18n/id.json")),
    (Lang::It, include_str!("../../static/i18n/it.json")),
    (Lang::Nl, include_str!("../../static/i18n/nl.json")),
    (Lang::Pl, include_str!("../../static/i18n/pl.json")),
    (Lang::PtBr, include_str!("../../static/i18n/pt-BR.json")),
    (Lang::Ru, include_str!("../../static/i18n/ru.json")),
    (Lang::Tr, include_str!("../../static/i18n/tr.json")),
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

/// The key of en.json whose placeholders a catalogue key of `lang` must have, and the one
/// placeholder it may leave out: the key itself, or for a plural variant `<key>#<category>`
/// ([`COUNTED`]) its plain key and the count. `None`: not a key `lang` may have.
pub fn base_key(lang: Lang, key: &str) -> Option<(&str, Option<&'static str>)> {
    let Some((base, category)) = key.split_once('#') else {
        return catalogue(Lang::En).contains_key(key).then_some((key, None));
    };
    let (_, count) = COUNTED.iter().find(|(k, _)| *k == base)?;
    let known = lang.plural_categories().iter().any(|c| *c != Plural::Other && c.name() == category);
    // A range keeps both its ends.
    known.then_some((base, Some(*count).filter(|_| !base.ends_with("_range"))))
}

/// Whether `text` may stand for the catalogue key `key` of `lang`: `Err` says why not (an
/// unknown key, or placeholders other than en.json's).
pub fn check_text(lang: Lang, key: &str, text: &str) -> Result<(), String> {
    let Some((base, count)) = base_key(lang, key) else {
        return Err(format!(
            "not a key of static/i18n/en.json (nor <key>#<plural category> of a counted key: {})",
            lang.plural_categories().iter().filter(|c| **c != Plural::Other).map(|c| c.name()).collect::<Vec<_>>().join(", ")
        ));
    };
    let want = placeholders(catalogue(Lang::En).get(base).map_or("", String::as_str));
    let have = placeholders(text);
    let without_count: Vec<&str> = want.iter().copied().filter(|p| Some(*p) != count).collect();
    if have == want || (count.is_some() && have == without_count) {
        Ok(())
    } else {
        Err(format!("must use the placeholders {want:?}, as the built-in text does"))
    }
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
        let n = per_second.round() as u64;
        return lang.fill_count("rate_many", n, &[("n", &lang.lang().number(n))]);
    }
    if per_second >= 0.75 {
        return lang.text("rate_one").to_owned();
    }
    let every = 1.0 / per_second;
    let (key, name, n) = if every < 10.0 {
        ("rate_every_seconds", "s", (every.round() as u64).max(2))
    } else if every < 90.0 {
        ("rate_every_seconds", "s", ((every / 5.0).round() * 5.0) as u64)
    } else {
        ("rate_every_minutes", "m", ((every / 60.0).round() as u64).max(2))
    };
    lang.fill_count(key, n, &[(name, &n.to_string())])
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
        (a, b) if a == b => lang.fill_count(many, a, &[("a", &a.to_string())]),
        (a, b) => lang.fill_count(range, b, &[("a", &a.to_string()), ("b", &b.to_string())]),
    }
}

/// Time left until opening as `[N d ]HH:MM:SS` (the same as queue.js counts down).
pub fn countdown_text(lang: &impl Words, seconds: u64) -> String {
    let (d, rest) = (seconds / 86_400, seconds % 86_400);
    let time = format!("{:02}:{:02}:{:02}", rest / 3600, rest % 3600 / 60, rest % 60);
    if d == 0 { time } else { lang.fill_count("countdown_days", d, &[("d", &d.to_string()), ("time", &time)]) }
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
        assert_eq!(CATALOGUE_SOURCES.len(), Lang::ALL.len());
        let plain = |c: &'static Catalogue| c.keys().filter(|k| !k.contains('#')).collect::<Vec<_>>();
        let mut names = std::collections::BTreeSet::new();
        for lang in Lang::ALL {
            let c = catalogue(lang);
            let (want, have) = (plain(en), plain(c));
            let missing: Vec<_> = want.iter().filter(|k| !have.contains(k)).collect();
            let extra: Vec<_> = have.iter().filter(|k| !want.contains(k)).collect();
            assert!(missing.is_empty() && extra.is_empty(), "{}: missing {missing:?}, extra {extra:?}", lang.tag());
            for (k, v) in c {
                // Plain keys: en.json's placeholders; plural variants: those of their key.
                assert_eq!(check_text(lang, k, v), Ok(()), "{}: {k}", lang.tag());
                assert!(!v.trim().is_empty(), "{}: {k} is empty", lang.tag());
                if !k.contains('#') {
                    assert_eq!(placeholders(v), placeholders(&en[k]), "{}: placeholders of {k}", lang.tag());
                }
            }
            assert!(names.insert(lang.text("lang_name")), "{}: lang_name twice", lang.tag());
            assert!(lang == Lang::En || c["title_waiting"] != en["title_waiting"], "{} is not translated", lang.tag());
        }
        // Variants: a counted key, a category of the language, placeholders of the key (the count may go).
        assert!(check_text(Lang::Ru, "eta_minutes#few", "около {a} минут").is_ok());
        assert!(check_text(Lang::Ar, "eta_minutes#two", "دقيقتان تقريبًا").is_ok());
        assert!(check_text(Lang::Ar, "eta_minutes_range#two", "{a} دقيقة").is_err());
        assert!(check_text(Lang::Ar, "eta_minutes_range#two", "{b} دقيقة").is_err());
        assert!(check_text(Lang::Ar, "announce_position#two", "أمامك شخصان").is_err());
        assert!(check_text(Lang::Ru, "eta_minutes#two", "{a}").is_err());
        assert!(check_text(Lang::Ru, "eta_minutes#other", "{a}").is_err());
        assert!(check_text(Lang::Ja, "eta_minutes#one", "{a}").is_err());
        assert!(check_text(Lang::En, "title_waiting#one", "x").is_err());
        assert!(check_text(Lang::En, "nope", "x").is_err());
        assert!(check_text(Lang::En, "eta_minutes", "{b}").is_err());
        for (key, count) in COUNTED {
            assert!(placeholders(&en[key]).contains(&count), "{key} holds {{{count}}}");
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
        assert_eq!(choose(None, None, Some("sv-SE,ja;q=0.3,ko;q=0.7")), Lang::Ko);
        assert_eq!(choose(None, None, Some("en;q=0.2, ko-KR")), Lang::Ko);
        assert_eq!(choose(None, None, Some("ja;q=0,sv")), Lang::En);
        assert_eq!(choose(None, None, Some("sv-SE")), Lang::En);
        assert_eq!(choose(None, None, None), Lang::En);
        assert_eq!(query_lang(Some("a=1&lang=zh-TW")), Some("zh-TW"));
        // The twelve added languages, with their regional variants.
        for (header, lang) in [
            ("ar", Lang::Ar),
            ("ar-EG,ar;q=0.9,en;q=0.8", Lang::Ar),
            ("ar-SA", Lang::Ar),
            ("de-DE,de;q=0.9", Lang::De),
            ("de-AT", Lang::De),
            ("de-CH", Lang::De),
            ("es", Lang::Es),
            ("es-419", Lang::Es),
            ("es-MX,es;q=0.9", Lang::Es),
            ("es-ES", Lang::Es),
            ("fa-IR", Lang::Fa),
            ("fa-AF", Lang::Fa),
            ("fr-FR", Lang::Fr),
            ("fr-CA,en;q=0.5", Lang::Fr),
            ("fr-BE", Lang::Fr),
            ("id-ID", Lang::Id),
            ("in", Lang::Id),
            ("it-IT", Lang::It),
            ("it-CH", Lang::It),
            ("nl-NL", Lang::Nl),
            ("nl-BE", Lang::Nl),
            ("pl-PL", Lang::Pl),
            ("pt", Lang::PtBr),
            ("pt-PT", Lang::PtBr),
            ("pt-BR", Lang::PtBr),
            ("pt_br", Lang::PtBr),
            ("ru-RU", Lang::Ru),
            ("ru-UA", Lang::Ru),
            ("tr-TR", Lang::Tr),
            ("uk-UA,ru;q=0.8,en;q=0.6", Lang::Ru),
            ("ca-ES,es;q=0.9", Lang::Es),
            ("en-GB,en;q=0.9,de;q=0.8", Lang::En),
            ("sv, de;q=0.4, fr;q=0.6", Lang::Fr),
            ("de;q=0.5, ar;q=0.5", Lang::De),
        ] {
            assert_eq!(choose(None, None, Some(header)), lang, "{header}");
        }
        // ?lang= and the cookie take our tags in any case, and a language of ours by a regional tag.
        for lang in Lang::ALL {
            assert_eq!(choose(Some(lang.tag()), None, Some("ja")), lang);
            assert_eq!(choose(None, Some(&lang.tag().to_ascii_uppercase()), Some("ja")), lang);
            assert_eq!(Lang::from_tag(lang.tag()), Some(lang));
        }
        assert_eq!(choose(Some("pt"), None, None), Lang::PtBr);
        assert_eq!(choose(Some("pt-PT"), None, None), Lang::PtBr);
        assert_eq!(choose(Some("es-MX"), None, None), Lang::Es);
        assert_eq!(choose(None, Some("fa-IR"), None), Lang::Fa);
        assert_eq!(choose(Some("sv"), Some("ar"), None), Lang::Ar);
        // Hostile values: only our tags are ever chosen; anything else falls through to English.
        let huge = format!("{},ja;q=0.1", "x-".repeat(50_000));
        assert_eq!(choose(Some("<script>"), Some("../../etc/passwd"), Some(&huge)), Lang::Ja);
        assert_eq!(choose(Some("zh%2DTW"), Some("ja\r\nSet-Cookie: x"), Some("ko;q=NaN, sv")), Lang::En);
        assert_eq!(choose(Some("ar\"><script>"), Some(&"de".repeat(40)), None), Lang::En);
        assert_eq!(choose(None, None, Some(";;;,,,q=1,")), Lang::En);
    }

    #[test]
    fn right_to_left_is_arabic_and_persian() {
        let rtl: Vec<_> = Lang::ALL.into_iter().filter(|l| l.is_rtl()).collect();
        assert_eq!(rtl, [Lang::Ar, Lang::Fa]);
        assert_eq!((Lang::Ar.dir(), Lang::Fa.dir(), Lang::En.dir(), Lang::ZhCn.dir()), ("rtl", "rtl", "ltr", "ltr"));
        // The switcher's order: by tag, and every tag once.
        let tags: Vec<_> = Lang::ALL.map(Lang::tag).to_vec();
        let mut sorted = tags.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(tags, sorted);
    }

    #[test]
    fn cldr_plural_categories() {
        use Plural::*;
        let cat = |l: Lang, ns: &[u64]| ns.iter().map(|n| l.plural(*n)).collect::<Vec<_>>();
        assert_eq!(cat(Lang::En, &[0, 1, 2, 11, 21]), [Other, One, Other, Other, Other]);
        assert_eq!(cat(Lang::De, &[1, 2]), [One, Other]);
        assert_eq!(cat(Lang::Fr, &[0, 1, 2, 100]), [One, One, Other, Other]);
        assert_eq!(cat(Lang::PtBr, &[0, 1, 2]), [One, One, Other]);
        assert_eq!(cat(Lang::Fa, &[0, 1, 2]), [One, One, Other]);
        assert_eq!(cat(Lang::Ja, &[0, 1, 2]), [Other, Other, Other]);
        assert_eq!(cat(Lang::Id, &[1]), [Other]);
        assert_eq!(
            cat(Lang::Ru, &[0, 1, 2, 4, 5, 11, 12, 14, 15, 21, 22, 25, 101, 111, 112, 122, 1001]),
            [Many, One, Few, Few, Many, Many, Many, Many, Many, One, Few, Many, One, Many, Many, Few, One]
        );
        assert_eq!(
            cat(Lang::Pl, &[0, 1, 2, 4, 5, 11, 12, 14, 21, 22, 25, 101, 102, 112, 122]),
            [Many, One, Few, Few, Many, Many, Many, Many, Many, Few, Many, Many, Few, Many, Few]
        );
        assert_eq!(
            cat(Lang::Ar, &[0, 1, 2, 3, 10, 11, 99, 100, 101, 102, 103, 110, 111, 199, 200, 1000, 1003]),
            [Zero, One, Two, Few, Few, Many, Many, Other, Other, Other, Few, Few, Many, Many, Other, Other, Few]
        );
        for lang in Lang::ALL {
            for n in 0..2000 {
                assert!(lang.plural_categories().contains(&lang.plural(n)), "{} {n}", lang.tag());
            }
        }
    }

    #[test]
    fn counts_take_the_languages_plural_forms() {
        assert_eq!(eta_text(&Lang::Ru, Some((300, 300))), "около 5 минут");
        assert_eq!(eta_text(&Lang::Ru, Some((21 * 60, 21 * 60))), "около 21 минуты");
        assert_eq!(eta_text(&Lang::Ru, Some((20 * 60, 21 * 60))), "около 20–21 минуты");
        assert_eq!(eta_text(&Lang::Ru, Some((7200, 7200))), "около 2 часов");
        assert_eq!(rate_text(&Lang::Ru, 0.5), "Пропускаем примерно одного человека каждые 2 секунды");
        assert_eq!(rate_text(&Lang::Ru, 0.2), "Пропускаем примерно одного человека каждые 5 секунд");
        assert_eq!(rate_text(&Lang::Ru, 21.0), "Пропускаем около 21 человека в секунду");
        assert_eq!(rate_text(&Lang::Pl, 0.25), "Wpuszczamy około jednej osoby co 4 sekundy");
        assert_eq!(rate_text(&Lang::Pl, 0.2), "Wpuszczamy około jednej osoby co 5 sekund");
        assert_eq!(rate_text(&Lang::Pl, 1.0 / 120.0), "Wpuszczamy około jednej osoby co 2 minuty");
        assert_eq!(eta_text(&Lang::Ar, Some((120, 120))), "دقيقتان تقريبًا");
        assert_eq!(eta_text(&Lang::Ar, Some((300, 300))), "5 دقائق تقريبًا");
        assert_eq!(eta_text(&Lang::Ar, Some((900, 900))), "15 دقيقة تقريبًا");
        assert_eq!(rate_text(&Lang::Ar, 0.5), "يدخل نحو شخص واحد كل ثانيتين");
        assert_eq!(rate_text(&Lang::Ar, 3.0), "يدخل نحو 3 أشخاص في الثانية");
        assert_eq!(rate_text(&Lang::Ar, 12.0), "يدخل نحو 12 شخصًا في الثانية");
        assert_eq!(countdown_text(&Lang::Ar, 3 * 86_400), "3 أيام 00:00:00");
        assert_eq!(Lang::En.fill_count("announce_position", 1, &[("ahead", "1"), ("eta", "x")]), "1 person ahead of you, x");
        assert_eq!(Lang::En.fill_count("announce_position", 2, &[("ahead", "2"), ("eta", "x")]), "2 people ahead of you, x");
        assert_eq!(Lang::Fr.fill_count("announce_position", 0, &[("ahead", "0"), ("eta", "x")]), "0 personne devant vous, x");
        assert_eq!(Lang::Ru.fill_count("announce_position", 3, &[("ahead", "3"), ("eta", "x")]), "Перед вами 3 человека, x");
        assert_eq!(Lang::Ar.fill_count("announce_position", 0, &[("ahead", "0"), ("eta", "x")]), "لا أحد أمامك، x");
        assert_eq!(Lang::Pl.fill_count("pow_progress", 22, &[("n", "22")]), "Sprawdzamy Twoją przeglądarkę… 22 próby");
        assert_eq!(Lang::En.fill_count("announce_tickets", 1, &[("n", "1")]), "About 1 ticket left");
        assert_eq!(Lang::En.fill_count("announce_tickets", 1200, &[("n", "1,200")]), "About 1,200 tickets left");
        assert_eq!(Lang::Ru.fill_count("announce_tickets", 21, &[("n", "21")]), "Осталось около 21 билета");
        assert_eq!(Lang::Ru.fill_count("announce_tickets", 22, &[("n", "22")]), "Осталось около 22 билетов");
        assert_eq!(Lang::Ar.fill_count("announce_tickets", 5, &[("n", "5")]), "بقي نحو 5 تذاكر");
        assert_eq!(Lang::Pl.fill_count("announce_tickets", 1, &[("n", "1")]), "Został 1 bilet");
        // Every counted key reads without a stray placeholder for the counts the pages show.
        for lang in Lang::ALL {
            for n in 0..300u64 {
                for (key, count) in COUNTED {
                    let args: Vec<(&str, String)> = placeholders(&catalogue(Lang::En)[key])
                        .into_iter()
                        .map(|p| (p, if p == count { n.to_string() } else { "x".into() }))
                        .collect();
                    let args: Vec<(&str, &str)> = args.iter().map(|(k, v)| (*k, v.as_str())).collect();
                    let t = lang.fill_count(key, n, &args);
                    assert!(!t.contains('{') && !t.is_empty(), "{} {key} {n}: {t}", lang.tag());
                }
            }
        }
    }

    #[test]
    fn numbers_keep_western_digits_grouped_as_the_language_does() {
        assert_eq!(Lang::En.number(1_234_567), "1,234,567");
        assert_eq!(Lang::Ar.number(1_234), "1,234");
        assert_eq!(Lang::De.number(1_234), "1.234");
        assert_eq!(Lang::Es.number(1_234), "1234");
        assert_eq!(Lang::Es.number(12_345), "12.345");
        assert_eq!(Lang::Fr.number(1_234), "1\u{202f}234");
        assert_eq!(Lang::Ru.number(1_234_567), "1\u{a0}234\u{a0}567");
        assert_eq!(Lang::Pl.number(1_234), "1234");
        assert_eq!(Lang::Pl.number(12_345), "12\u{a0}345");
        for lang in Lang::ALL {
            assert_eq!(lang.number(999), "999");
            assert_eq!(lang.number(0), "0");
        }
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
        let rates = [0.004, 0.008, 0.02, 0.04, 0.05, 0.2, 0.25, 0.3, 0.5, 0.8, 1.0, 1.6, 2.4, 3.0, 12.0, 21.0, 1234.4];
        let etas = [(10, 40), (50, 70), (60, 60), (120, 120), (300, 300), (400, 900), (1260, 1260), (1200, 1260), (5000, 6000), (7200, 10_000)];
        let countdowns = [0, 59, 3725, 86_400 + 5, 2 * 86_400, 3 * 86_400 + 7200, 11 * 86_400, 21 * 86_400];
        let numbers = [0u64, 1, 2, 3, 4, 5, 11, 12, 21, 22, 100, 101, 999, 1000, 1234, 12_345, 1_234_567];
        let script = format!(
            "const q = require({js:?}); const out = {{}};\n\
             for (const tag of {tags:?}) {{\n\
               const T = JSON.parse(require('fs').readFileSync({dir:?} + '/' + tag + '.json', 'utf8')); T['@lang'] = tag;\n\
               out[tag] = [{rates:?}.map(r => q.rateText(T, r)), {etas_js:?}.map(([a, b]) => q.etaText(T, {{low: a, high: b}})),\n\
                           {countdowns:?}.map(s => q.countdownText(T, s)), [q.etaText(T, null)],\n\
                           {numbers:?}.map(n => q.number(n, T)), [...Array(1200).keys()].map(n => q.plural(tag, n)),\n\
                           {numbers:?}.map(n => q.fillCount(T, 'announce_position', n, {{ahead: q.number(n, T), eta: 'x'}})),\n\
                           {numbers:?}.map(n => q.fillCount(T, 'pow_progress', n, {{n: q.number(n, T)}})),\n\
                           {numbers:?}.map(n => q.ticketsText(T, n))];\n\
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
                numbers.iter().map(|n| lang.number(*n)).collect(),
                (0..1200).map(|n| lang.plural(n).name().to_owned()).collect(),
                numbers.iter().map(|n| lang.fill_count("announce_position", *n, &[("ahead", &lang.number(*n)), ("eta", "x")])).collect(),
                numbers.iter().map(|n| lang.fill_count("pow_progress", *n, &[("n", &lang.number(*n))])).collect(),
                numbers.iter().map(|n| lang.fill_count("announce_tickets", *n, &[("n", &lang.number(*n))])).collect(),
            ];
            assert_eq!(js[lang.tag()], rust, "{}", lang.tag());
        }
    }
}
