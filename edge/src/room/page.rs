//! The queue page, rendered on the server for each visit: the fan's language, the event's name,
//! logo and colours, and the visitor's real figures (people ahead, tickets left, wait, release
//! rate, the countdown to opening), so a fan without JavaScript sees the same page as one with it;
//! static/queue.js then keeps it current from the status JSON with the same catalogue, which the
//! page carries.
//!
//! The template is static/queue.html unless `[edge.queue-page] template` names another; its
//! `{{slots}}` are:
//!
//! | slot | filled with | required |
//! |---|---|---|
//! | `{{head}}` | Wicket's `<meta>`s, the stylesheet, colours, the no-JS refresh, the catalogue | yes |
//! | `{{queue}}` | the live part: headline, figures, countdown, bot check, scripts | yes |
//! | `{{lang}}` | the page language (`<html lang>`) | no |
//! | `{{dir}}` | its direction, `rtl` for Arabic and Persian, else `ltr` (`<html dir>`) | no |
//! | `{{title}}` | headline · event name | no |
//! | `{{brand}}` | the event name (else "Waiting room" in the fan's language) | no |
//! | `{{logo}}` | an `<img>` of `logo-url`, or nothing | no |
//! | `{{languages}}` | links to the page in each language | no |
//!
//! Everything is checked once at start ([`QueuePage::compile`]): a missing required slot, an
//! unknown one, an unreadable file, a bad colour or an override with an unknown key or different
//! placeholders is a config error with its key path.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{Phase, Status};
use crate::check::ConfigIssue;
use crate::i18n::{Brand, Catalogue, Lang, Words, countdown_text, eta_text, html_escape, rate_text};

/// static/queue.js, served at `/static/queue.js` unless `static-dir` has its own.
pub const QUEUE_JS: &str = include_str!("../../../static/queue.js");
/// static/queue.css, served at `/static/queue.css` unless `static-dir` has its own.
pub const QUEUE_CSS: &str = include_str!("../../../static/queue.css");

/// `[edge.queue-page]`: what an operator may change on the queue page. Every field is optional;
/// the built-in page (static/queue.html, the catalogues of static/i18n/) is the default.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct QueuePageConfig {
    /// An HTML template file (relative to the config file) replacing static/queue.html. It must
    /// hold `{{head}}` (inside `<head>`) and `{{queue}}` (the live part of the page); it may
    /// hold `{{lang}}`, `{{dir}}`, `{{title}}`, `{{brand}}`, `{{logo}}` and `{{languages}}`. Default: the
    /// built-in template.
    pub template: Option<String>,
    /// The event's name, shown at the top of the page and in its title. Default: none (the
    /// catalogue's "Waiting room").
    pub event_name: Option<String>,
    /// URL of a logo image (`https://...`, `http://...` or a path on this site). Default: none.
    pub logo_url: Option<String>,
    /// Colours (`#rgb` or `#rrggbb`). Default: the built-in light and dark palettes.
    pub colours: QueuePageColours,
    /// The UTC offset of the sale's audience (`+08:00`, `-05:00`): a page shown without
    /// JavaScript gives the opening time in it too, beside UTC (with JavaScript the fan's own zone
    /// replaces it). Default: none (UTC only without JavaScript).
    pub utc_offset: Option<String>,
    /// Text overrides per language and catalogue key, e.g. `[edge.queue-page.text.en]
    /// title_waiting = "You are in the line for the Summer Tour"`. Keys and `{placeholders}` are
    /// those of static/i18n/en.json; a counted key also takes a plural variant `"<key>#<category>"`
    /// in a CLDR category of that language (the count may be left out, as in Arabic "دقيقتان"). The
    /// edge's refusal pages (`err_*` keys) use the overrides too. Default: none.
    pub text: BTreeMap<String, BTreeMap<String, String>>,
}

/// `[edge.queue-page.colours]`: each replaces the built-in colour in light and dark mode.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct QueuePageColours {
    /// Buttons, the progress bar, the chosen language. Default `#d4380d` (dark: `#ff7a45`).
    pub accent: Option<String>,
    /// Text on the accent colour. Default `#ffffff`.
    pub accent_text: Option<String>,
    /// The page behind the card. Default `#f4f5f7` (dark: `#111418`).
    pub background: Option<String>,
    /// The card. Default `#ffffff` (dark: `#1b2027`).
    pub card: Option<String>,
    /// Text. Default `#1b1f24` (dark: `#eef1f4`).
    pub text: Option<String>,
}

/// The built-in template (static/queue.html).
pub const BUILTIN_TEMPLATE: &str = include_str!("../../../static/queue.html");

/// A template slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Head,
    Queue,
    Lang,
    Dir,
    Title,
    Brand,
    Logo,
    Languages,
}

impl Slot {
    const ALL: [(&'static str, Slot); 8] = [
        ("head", Slot::Head),
        ("queue", Slot::Queue),
        ("lang", Slot::Lang),
        ("dir", Slot::Dir),
        ("title", Slot::Title),
        ("brand", Slot::Brand),
        ("logo", Slot::Logo),
        ("languages", Slot::Languages),
    ];
    const REQUIRED: [Slot; 2] = [Slot::Head, Slot::Queue];
}

#[derive(Debug, Clone)]
enum Piece {
    Text(String),
    Slot(Slot),
}

/// Splits a template at its `{{slots}}`; `Err` names the problems.
fn parse_template(src: &str) -> Result<Vec<Piece>, Vec<String>> {
    let mut pieces = Vec::new();
    let mut problems = Vec::new();
    let mut rest = src;
    while let Some(start) = rest.find("{{") {
        pieces.push(Piece::Text(rest[..start].to_owned()));
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            problems.push("a `{{` without its `}}`".to_owned());
            break;
        };
        let name = after[..end].trim();
        match Slot::ALL.iter().find(|(n, _)| *n == name) {
            Some((_, slot)) => pieces.push(Piece::Slot(*slot)),
            None => problems.push(format!(
                "unknown slot {{{{{name}}}}} (known: {})",
                Slot::ALL.iter().map(|(n, _)| format!("{{{{{n}}}}}")).collect::<Vec<_>>().join(", ")
            )),
        }
        rest = &after[end + 2..];
    }
    pieces.push(Piece::Text(rest.to_owned()));
    for slot in Slot::REQUIRED {
        if !pieces.iter().any(|p| matches!(p, Piece::Slot(s) if *s == slot)) {
            let name = Slot::ALL.iter().find(|(_, s)| *s == slot).map_or("", |(n, _)| n);
            problems.push(format!("the template must hold {{{{{name}}}}}"));
        }
    }
    if problems.is_empty() { Ok(pieces) } else { Err(problems) }
}

/// How often the page without JavaScript refreshes for a status that asks for a poll after
/// `poll_after_ms` (2-30 s).
fn noscript_refresh_s(poll_after_ms: u64) -> u64 {
    (poll_after_ms / 1000).clamp(super::told::NOSCRIPT_MIN_REFRESH_S, 30)
}

/// `#rgb` or `#rrggbb`.
fn is_colour(s: &str) -> bool {
    s.strip_prefix('#').is_some_and(|h| (h.len() == 3 || h.len() == 6) && h.chars().all(|c| c.is_ascii_hexdigit()))
}

/// The queue page, compiled from `[edge.queue-page]`.
#[derive(Debug, Clone)]
pub struct QueuePage {
    template: Vec<Piece>,
    /// Each language's catalogue with the operator's overrides applied.
    texts: BTreeMap<Lang, Catalogue>,
    event_name: Option<String>,
    logo_url: Option<String>,
    /// `:root { --accent: ... }` from `colours`, or empty.
    colours_css: String,
    /// `utc-offset` in minutes east of UTC.
    utc_offset: Option<i32>,
}

impl Default for QueuePage {
    fn default() -> Self {
        QueuePage::compile(&QueuePageConfig::default(), &|p| PathBuf::from(p)).expect("the built-in queue page compiles")
    }
}

/// The catalogue of one language, with overrides: what the page's text comes from.
pub struct PageWords<'a> {
    lang: Lang,
    texts: &'a Catalogue,
    colours_css: &'a str,
    logo_url: Option<&'a str>,
    event_name: Option<&'a str>,
}

impl Words for PageWords<'_> {
    fn lang(&self) -> Lang {
        self.lang
    }
    fn brand(&self) -> Brand<'_> {
        Brand { colours_css: self.colours_css, logo_url: self.logo_url, event_name: self.event_name }
    }
    fn text(&self, key: &str) -> &str {
        self.texts.get(key).map_or("", String::as_str)
    }
}

/// What a page is rendered from.
pub struct PageView<'a> {
    /// The fan's language.
    pub lang: Lang,
    /// The visitor's status; `None` when the room asks for a bot check first.
    pub status: Option<&'a Status>,
    /// The room's bot check (`off`, `pow`, `captcha`), for queue.js.
    pub bot_check: &'a str,
    /// Server time, Unix seconds (the countdown counts from it, not from the fan's clock).
    pub now: i64,
    /// Seconds until the room opens (`not_open`).
    pub opens_in: Option<u64>,
    /// The room's own `event-name`, over `[edge.queue-page] event-name`.
    pub event_name: Option<&'a str>,
}

impl QueuePage {
    /// Reads and checks `[edge.queue-page]`; `resolve` turns a config-relative path into a file.
    pub fn compile(cfg: &QueuePageConfig, resolve: &dyn Fn(&str) -> PathBuf) -> Result<QueuePage, Vec<ConfigIssue>> {
        let key = |k: &str| format!("edge.queue-page.{k}");
        let mut issues = Vec::new();
        let src = match &cfg.template {
            None => Some(BUILTIN_TEMPLATE.to_owned()),
            Some(p) => match std::fs::read_to_string(resolve(p)) {
                Ok(s) => Some(s),
                Err(e) => {
                    issues.push(ConfigIssue { path: key("template"), message: format!("cannot read {}: {e}", resolve(p).display()) });
                    None
                }
            },
        };
        let template = match src.as_deref().map(parse_template) {
            Some(Ok(t)) => t,
            Some(Err(problems)) => {
                issues.extend(problems.into_iter().map(|m| ConfigIssue { path: key("template"), message: m }));
                Vec::new()
            }
            None => Vec::new(),
        };
        let c = &cfg.colours;
        let mut css = String::new();
        for (name, var, value) in [
            ("accent", "--accent", &c.accent),
            ("accent-text", "--accent-text", &c.accent_text),
            ("background", "--bg", &c.background),
            ("card", "--card", &c.card),
            ("text", "--text", &c.text),
        ] {
            let Some(v) = value else { continue };
            if is_colour(v) {
                css.push_str(&format!("{var}:{v};"));
            } else {
                issues.push(ConfigIssue { path: key(&format!("colours.{name}")), message: format!("not a colour like #1a2b3c: {v:?}") });
            }
        }
        let colours_css = if css.is_empty() { String::new() } else { format!("<style>:root{{{css}}}</style>") };
        if let Some(url) = &cfg.logo_url {
            let ok = (url.starts_with("https://") || url.starts_with("http://") || url.starts_with('/'))
                && !url.chars().any(|c| c.is_whitespace() || c == '"' || c == '<' || c == '>');
            if !ok {
                issues.push(ConfigIssue {
                    path: key("logo-url"),
                    message: format!("not an http(s) URL or a path on this site: {url:?}"),
                });
            }
        }
        let utc_offset = match cfg.utc_offset.as_deref().map(parse_offset) {
            None => None,
            Some(Some(m)) => Some(m),
            Some(None) => {
                issues.push(ConfigIssue { path: key("utc-offset"), message: "an offset like +08:00 or -05:30 (at most 14:00)".into() });
                None
            }
        };
        if cfg.event_name.as_deref().is_some_and(|n| n.trim().is_empty()) {
            issues.push(ConfigIssue { path: key("event-name"), message: "empty".into() });
        }
        let mut texts: BTreeMap<Lang, Catalogue> = Lang::ALL.iter().map(|l| (*l, crate::i18n::catalogue(*l).clone())).collect();
        for (tag, overrides) in &cfg.text {
            let Some(lang) = Lang::from_tag(tag).filter(|l| l.tag() == tag) else {
                issues.push(ConfigIssue {
                    path: key(&format!("text.{tag}")),
                    message: format!("not one of the page's languages ({})", Lang::ALL.map(Lang::tag).join(", ")),
                });
                continue;
            };
            for (k, v) in overrides {
                let path = key(&format!("text.{tag}.{k}"));
                match crate::i18n::check_text(lang, k, v) {
                    Err(message) => issues.push(ConfigIssue { path, message }),
                    Ok(()) => {
                        texts.get_mut(&lang).map(|c| c.insert(k.clone(), v.clone()));
                    }
                }
            }
        }
        if !issues.is_empty() {
            return Err(issues);
        }
        Ok(QueuePage { template, texts, event_name: cfg.event_name.clone(), logo_url: cfg.logo_url.clone(), colours_css, utc_offset })
    }

    /// The words of `lang` on this page.
    pub fn words(&self, lang: Lang) -> PageWords<'_> {
        PageWords {
            lang,
            texts: &self.texts[&lang],
            colours_css: &self.colours_css,
            logo_url: self.logo_url.as_deref(),
            event_name: self.event_name.as_deref(),
        }
    }

    /// The whole page.
    pub fn render(&self, v: &PageView<'_>) -> String {
        let w = self.words(v.lang);
        let brand = v.event_name.or(self.event_name.as_deref()).unwrap_or_else(|| w.text("brand")).to_owned();
        let (title_key, _) = headline_keys(v.status);
        let mut out = String::with_capacity(8192);
        for piece in &self.template {
            match piece {
                Piece::Text(t) => out.push_str(t),
                Piece::Slot(Slot::Lang) => out.push_str(v.lang.tag()),
                Piece::Slot(Slot::Dir) => out.push_str(v.lang.dir()),
                Piece::Slot(Slot::Title) => out.push_str(&html_escape(&format!("{} · {brand}", w.text(title_key)))),
                Piece::Slot(Slot::Brand) => out.push_str(&html_escape(&brand)),
                Piece::Slot(Slot::Logo) => {
                    if let Some(url) = &self.logo_url {
                        out.push_str(&format!("<img class=\"logo\" src=\"{}\" alt=\"\">", html_escape(url)));
                    }
                }
                Piece::Slot(Slot::Languages) => out.push_str(&languages(&w, v.lang)),
                Piece::Slot(Slot::Head) => out.push_str(&self.head(v, &w, &brand)),
                Piece::Slot(Slot::Queue) => out.push_str(&queue(v, &w, self.utc_offset)),
            }
        }
        out
    }

    fn head(&self, v: &PageView<'_>, w: &PageWords<'_>, brand: &str) -> String {
        // Without JavaScript the page refreshes itself at the status's pace (2-30 s), and just
        // after opening; not when nothing more can happen, nor when a bot check needs a script.
        let refresh = v.status.and_then(|s| {
            let done = matches!(s.state, Phase::Closed) || (s.state == Phase::SoldOut && !s.restock_possible);
            let mut secs = noscript_refresh_s(s.poll_after_ms);
            if let Some(o) = v.opens_in {
                secs = secs.min(o + 1).max(1);
            }
            (!done).then_some(secs)
        });
        // The catalogue, and first the language's tag under "@lang" (queue.js's plural rules and
        // number grouping follow it).
        let catalogue = serde_json::to_string(w.texts).unwrap_or_default().replace('<', "\\u003c");
        let catalogue = format!("{{\"@lang\":\"{}\",{}", v.lang.tag(), catalogue.strip_prefix('{').unwrap_or("}"));
        let mut h = format!(
            "<meta name=\"wicket-bot-check\" content=\"{}\">\n\
             <meta name=\"wicket-captcha-script\" content=\"\">\n\
             <meta name=\"wicket-captcha-sitekey\" content=\"\">\n\
             <meta name=\"wicket-captcha-class\" content=\"\">\n\
             <meta name=\"wicket-now\" content=\"{}\">\n\
             <meta name=\"wicket-brand\" content=\"{}\">\n\
             <link rel=\"stylesheet\" href=\"/static/queue.css\">\n{}",
            html_escape(v.bot_check),
            v.now,
            html_escape(brand),
            self.colours_css
        );
        if let Some(s) = refresh {
            h.push_str(&format!("<noscript><meta http-equiv=\"refresh\" content=\"{s}\"></noscript>\n"));
        }
        h.push_str(&format!("<script type=\"application/json\" id=\"wicket-text\">{catalogue}</script>\n"));
        h
    }
}

/// Catalogue keys of the headline and detail for a status (`None`: the bot check).
fn headline_keys(status: Option<&Status>) -> (&'static str, &'static str) {
    let Some(s) = status else { return ("title_check", "pow_running") };
    match s.state {
        Phase::Waiting => ("title_waiting", "detail_waiting"),
        Phase::NotOpen if s.ahead.is_none() => ("title_not_open", "detail_not_open_drawn"),
        Phase::NotOpen => ("title_not_open", "detail_not_open"),
        Phase::Paused => ("title_paused", "detail_paused"),
        Phase::SoldOut if s.restock_possible => ("title_sold_out_for_now", "detail_sold_out_for_now"),
        Phase::SoldOut => ("title_sold_out", "detail_sold_out"),
        Phase::Closed => ("title_closed", "detail_closed"),
        Phase::Stopped => ("title_stopped", "detail_stopped"),
        Phase::Admitted => ("title_admitted", "detail_admitted_link"),
    }
}

/// The language switcher: the current language's name opens (without JavaScript, a
/// `<details>`) a list of all the languages, each by its own name, in [`Lang::ALL`]'s order.
fn languages(w: &PageWords<'_>, current: Lang) -> String {
    let label = html_escape(w.text("languages"));
    let mut out = format!(
        "<nav class=\"lang\" aria-label=\"{label}\"><details><summary title=\"{label}\"><span class=\"sr-only\">{label}: </span>{}</summary><div class=\"lang-list\">",
        html_escape(current.text("lang_name"))
    );
    for l in Lang::ALL {
        let current = if l == current { " aria-current=\"true\"" } else { "" };
        out.push_str(&format!(
            "<a href=\"?lang={t}\" dir=\"{d}\" lang=\"{t}\" hreflang=\"{t}\"{current}>{}</a>",
            html_escape(l.text("lang_name")),
            t = l.tag(),
            d = l.dir()
        ));
    }
    out.push_str("</div></details></nav>");
    out
}

/// The `hidden` attribute when `hide`.
fn hidden(hide: bool) -> &'static str {
    if hide { " hidden" } else { "" }
}

/// The live part of the page, with the figures of `v.status` filled in.
fn queue(v: &PageView<'_>, w: &PageWords<'_>, utc_offset: Option<i32>) -> String {
    let t = |k: &str| html_escape(w.text(k));
    let (title_key, detail_key) = headline_keys(v.status);
    let s = v.status;
    let state = s.map(|s| s.state);
    let for_now = s.is_some_and(|s| s.state == Phase::SoldOut && s.restock_possible);
    let show = matches!(state, Some(Phase::Waiting | Phase::NotOpen | Phase::Paused)) || for_now;
    let ahead = s.and_then(|s| s.ahead);
    let ahead_text = ahead.map(|a| w.fill("people", &[("n", &v.lang.number(a))])).unwrap_or_default();
    // Beside the people ahead, the tickets left (already rounded down by the status): the fan's
    // chance in two figures.
    let tickets = s.and_then(|s| s.tickets_left);
    let tickets_text = tickets.map(|n| w.fill("tickets_about", &[("n", &v.lang.number(n))])).unwrap_or_default();
    let eta_text = match state {
        Some(Phase::Waiting) => eta_text(w, s.and_then(|s| s.eta_seconds).map(|e| (e.low, e.high))),
        Some(Phase::Paused) => w.text("eta_paused").to_owned(),
        _ => String::new(),
    };
    let rate = match s {
        Some(s) if s.state == Phase::Waiting => rate_text(w, s.release_per_second),
        _ => String::new(),
    };
    let not_open = state == Some(Phase::NotOpen);
    let opens_at = s.and_then(|s| s.opens_at.as_deref()).unwrap_or("");
    let opens_at_text = if opens_at.is_empty() {
        String::new()
    } else {
        // 2026-12-01T02:00:00Z → 2026-12-01 02:00 (UTC); the line under it (`opens-at-local`)
        // gives the audience's offset, and queue.js the fan's own zone.
        let utc = opens_at.replacen('T', " ", 1);
        let utc = utc.trim_end_matches('Z');
        let utc = utc.strip_suffix(":00").unwrap_or(utc);
        w.fill("opens_at", &[("time", utc)])
    };
    // The opening in the audience's zone (`utc-offset`), for a page without JavaScript; queue.js
    // writes the fan's own zone there.
    let opens_at_local = match (super::config::parse_time(opens_at), utc_offset) {
        (Some(t), Some(m)) => local_time(t, m),
        _ => String::new(),
    };
    let countdown = v.opens_in.map(|o| countdown_text(w, o)).unwrap_or_default();
    let mut out = format!(
        "<h1 id=\"headline\">{}</h1>\n<p id=\"detail\" class=\"detail\">{}</p>\n",
        t(title_key),
        t(detail_key)
    );
    if s.is_none() || matches!(v.bot_check, "pow" | "captcha") {
        // No place yet, or a place with the room's check still owed: only a script can give it.
        out.push_str(&format!("<noscript><p class=\"noscript\">{}</p></noscript>\n", t("detail_check_needs_js")));
    }
    out.push_str(&format!(
        "<section id=\"queue\" class=\"queue\" aria-labelledby=\"headline\" data-state=\"{state}\"{queue_hidden}>\n\
         <div id=\"opening\" class=\"opening\"{opening_hidden}>\n\
         <p class=\"opens-label\">{opens_in}</p>\n\
         <p id=\"countdown\" class=\"countdown\" data-opens-at=\"{opens_at}\" aria-live=\"off\">{countdown}</p>\n\
         <p id=\"opens-at\" class=\"small\">{opens_at_text}</p>\n\
         <p id=\"opens-at-local\" class=\"small\" dir=\"ltr\">{opens_at_local}</p>\n\
         </div>\n\
         <dl class=\"figures\">\n\
         <div id=\"ahead-box\" class=\"wide\"{ahead_hidden}><dt>{ahead_label}</dt><dd id=\"ahead\">{ahead_text}</dd></div>\n\
         <div id=\"tickets-box\" class=\"wide\"{tickets_hidden}><dt>{tickets_label}</dt><dd id=\"tickets\">{tickets_text}</dd></div>\n\
         <div id=\"eta-box\" class=\"wide\"{eta_hidden}><dt>{eta_label}</dt><dd id=\"eta\">{eta_text}</dd></div>\n\
         </dl>\n\
         <div id=\"progress\" hidden>\n\
         <div class=\"bar\" id=\"bar\" role=\"progressbar\" aria-valuemin=\"0\" aria-valuemax=\"100\" aria-valuenow=\"0\" aria-labelledby=\"bar-label\"><div class=\"fill\" id=\"fill\"></div></div>\n\
         <p class=\"small\" id=\"bar-label\"><span>{progress}</span> <span id=\"percent\">0%</span></p>\n\
         </div>\n\
         <p class=\"small\" id=\"rate\">{rate}</p>\n\
         </section>\n",
        state = state.map_or("check", phase_name),
        queue_hidden = hidden(!show),
        opening_hidden = hidden(!not_open),
        opens_in = t("opens_in"),
        opens_at = html_escape(opens_at),
        countdown = html_escape(&countdown),
        opens_at_text = html_escape(&opens_at_text),
        opens_at_local = html_escape(&opens_at_local),
        ahead_hidden = hidden(ahead.is_none()),
        ahead_label = t("ahead"),
        ahead_text = html_escape(&ahead_text),
        tickets_hidden = hidden(tickets.is_none()),
        tickets_label = t("tickets_left"),
        tickets_text = html_escape(&tickets_text),
        eta_hidden = hidden(eta_text.is_empty()),
        eta_label = t("eta"),
        eta_text = html_escape(&eta_text),
        progress = t("progress"),
        rate = html_escape(&rate),
    ));
    out.push_str(&format!(
        "<section id=\"check\" class=\"check\" hidden>\n<h2>{}</h2>\n<p id=\"check-text\">{}</p>\n<div id=\"captcha-slot\" class=\"captcha-slot\"></div>\n</section>\n\
         <p id=\"go\" class=\"go\" hidden><a id=\"go-link\" href=\"/\">{}</a></p>\n\
         <p id=\"conn\" class=\"small muted\" aria-hidden=\"true\"></p>\n\
         <div id=\"announce\" class=\"sr-only\" aria-live=\"polite\" aria-atomic=\"true\"></div>\n\
         <div id=\"announce-now\" class=\"sr-only\" aria-live=\"assertive\" aria-atomic=\"true\"></div>\n",
        t("check_title"),
        t("pow_running"),
        t("go_now")
    ));
    if let Some(s) = s
        && !(matches!(s.state, Phase::Closed) || (s.state == Phase::SoldOut && !s.restock_possible))
    {
        let secs = noscript_refresh_s(s.poll_after_ms);
        out.push_str(&format!(
            "<noscript><p class=\"noscript\">{}</p></noscript>\n",
            html_escape(&w.fill_count("noscript_note", secs, &[("s", &secs.to_string())]))
        ));
    }
    out.push_str(&format!(
        "<script src=\"{}\" defer></script>\n<script src=\"/static/queue.js\" defer></script>\n",
        crate::bot::POW_JS_PATH
    ));
    out
}

/// `+08:00` / `-05:30` → minutes east of UTC (at most 14 hours).
fn parse_offset(s: &str) -> Option<i32> {
    let (sign, rest) = match s.as_bytes().first()? {
        b'+' => (1, &s[1..]),
        b'-' => (-1, &s[1..]),
        _ => return None,
    };
    let (h, m) = rest.split_once(':')?;
    if h.len() != 2 || m.len() != 2 || !h.bytes().chain(m.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (h, m): (i32, i32) = (h.parse().ok()?, m.parse().ok()?);
    (m < 60 && h * 60 + m <= 14 * 60).then_some(sign * (h * 60 + m))
}

/// Unix seconds at `offset` minutes east of UTC: `2026-12-01 10:00 (UTC+08:00)` (the form queue.js
/// writes for the fan's own zone).
fn local_time(t: i64, offset: i32) -> String {
    let Ok(at) = time::OffsetDateTime::from_unix_timestamp(t + i64::from(offset) * 60) else { return String::new() };
    let a = offset.unsigned_abs();
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02} (UTC{}{:02}:{:02})",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        if offset < 0 { '-' } else { '+' },
        a / 60,
        a % 60
    )
}

/// The status JSON's name of a phase.
fn phase_name(p: Phase) -> &'static str {
    match p {
        Phase::NotOpen => "not_open",
        Phase::Waiting => "waiting",
        Phase::Admitted => "admitted",
        Phase::Paused => "paused",
        Phase::SoldOut => "sold_out",
        Phase::Closed => "closed",
        Phase::Stopped => "stopped",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::room::Eta;

    fn status(state: Phase, ahead: Option<u64>, rate: f64) -> Status {
        Status {
            state,
            position: ahead.map(|a| a + 46),
            ahead,
            eta_seconds: Some(Eta { low: 240, high: 420 }),
            poll_after_ms: 8000,
            release_per_second: rate,
            ..Status::closed()
        }
    }

    fn view<'a>(s: Option<&'a Status>, lang: Lang) -> PageView<'a> {
        PageView { lang, status: s, bot_check: "off", now: 1_800_000_000, opens_in: None, event_name: None }
    }

    #[test]
    fn a_waiting_fan_sees_real_figures_without_javascript() {
        let page = QueuePage::default();
        let s = status(Phase::Waiting, Some(1259), 0.2);
        let html = page.render(&view(Some(&s), Lang::En));
        assert!(html.contains("<html lang=\"en\" dir=\"ltr\">"), "{html}");
        assert!(html.contains("<dd id=\"ahead\">1,259</dd>"), "{html}");
        assert!(html.contains("<dd id=\"eta\">about 4–7 minutes</dd>"), "{html}");
        assert!(html.contains("about one person every 5 seconds"), "{html}");
        assert!(!html.contains(">—<") && !html.contains("{{") && !html.contains("0 people a second"), "{html}");
        // One position figure: people ahead; the admission-order place is not shown.
        assert!(!html.contains("1,305") && !html.contains("Your place"), "{html}");
        assert!(html.contains("<noscript><meta http-equiv=\"refresh\" content=\"8\"></noscript>"), "{html}");
        assert!(html.contains("refreshes every 8 seconds"), "{html}");
        // Near the front (told a poll a second) it refreshes every 2 s: the release's promise of the
        // place lapses a few seconds after its turn if its fan is not admitted (told::Told).
        let near = Status { poll_after_ms: 1100, ..s.clone() };
        let html = page.render(&view(Some(&near), Lang::En));
        assert!(html.contains("<noscript><meta http-equiv=\"refresh\" content=\"2\"></noscript>"), "{html}");
        assert!(html.contains("refreshes every 2 seconds"), "{html}");
        assert!(html.contains("<title>You are in line · Waiting room</title>"), "{html}");
        let zh = page.render(&view(Some(&s), Lang::ZhCn));
        assert!(zh.contains("<dd id=\"ahead\">1,259 人</dd>") && zh.contains("约 4–7 分钟") && zh.contains("当前约每 5 秒放行 1 人"), "{zh}");
        for lang in Lang::ALL {
            let html = page.render(&view(Some(&s), lang));
            assert!(html.contains(&format!("<html lang=\"{}\" dir=\"{}\">", lang.tag(), lang.dir())) && html.contains(lang.text("title_waiting")));
            assert!(html.contains(&format!("lang=\"{}\" hreflang=\"{0}\" aria-current=\"true\"", lang.tag())));
        }
    }

    #[test]
    fn the_tickets_left_stand_beside_the_people_ahead_once_known() {
        let page = QueuePage::default();
        let mut s = status(Phase::Waiting, Some(8_000), 20.0);
        let html = page.render(&view(Some(&s), Lang::En));
        assert!(html.contains("<div id=\"tickets-box\" class=\"wide\" hidden><dt>Tickets left</dt><dd id=\"tickets\"></dd></div>"), "{html}");
        s.tickets_left = Some(1_200);
        let html = page.render(&view(Some(&s), Lang::En));
        assert!(html.contains("<dd id=\"ahead\">8,000</dd></div>\n<div id=\"tickets-box\" class=\"wide\"><dt>Tickets left</dt><dd id=\"tickets\">about 1,200</dd>"), "{html}");
        for (lang, want) in [(Lang::De, "etwa 1.200"), (Lang::Ja, "約1,200枚"), (Lang::Ru, "около 1\u{a0}200"), (Lang::Ar, "1,200 تقريبًا")] {
            let html = page.render(&view(Some(&s), lang));
            assert!(html.contains(&format!("<dd id=\"tickets\">{want}</dd>")), "{}: {html}", lang.tag());
        }
        for lang in Lang::ALL {
            let html = page.render(&view(Some(&s), lang));
            let dd = html.split("<dd id=\"tickets\">").nth(1).and_then(|r| r.split("</dd>").next()).unwrap_or("");
            assert!(html.contains(&format!("<dt>{}</dt>", html_escape(lang.text("tickets_left")))), "{}", lang.tag());
            assert!(dd.contains(&lang.number(1_200)) && !dd.contains('{'), "{}: {dd}", lang.tag());
        }
        // Sold out for good: the figures are hidden with the rest of the queue.
        s.state = Phase::SoldOut;
        s.tickets_left = Some(0);
        assert!(page.render(&view(Some(&s), Lang::En)).contains("data-state=\"sold_out\" hidden>"));
    }

    #[test]
    fn not_open_shows_the_opening_time_and_a_countdown() {
        let page = QueuePage::default();
        let mut s = status(Phase::NotOpen, Some(3), 0.0);
        s.opens_at = Some("2026-12-01T02:00:00Z".into());
        s.eta_seconds = None;
        let mut v = view(Some(&s), Lang::Ja);
        v.opens_in = Some(2 * 86_400 + 3600 + 61);
        let html = page.render(&v);
        assert!(html.contains("data-opens-at=\"2026-12-01T02:00:00Z\" aria-live=\"off\">2日 01:01:01</p>"), "{html}");
        assert!(html.contains("開始時刻：2026-12-01 02:00（UTC）"), "{html}");
        assert!(html.contains("<dd id=\"ahead\">3人</dd>"), "{html}");
        assert!(html.contains("<div id=\"eta-box\" class=\"wide\" hidden>"), "{html}");
        assert!(html.contains("<meta name=\"wicket-now\" content=\"1800000000\">"), "{html}");
        // Just before opening, the no-JS page refreshes at the opening.
        v.opens_in = Some(2);
        assert!(page.render(&v).contains("http-equiv=\"refresh\" content=\"3\""));
    }

    #[test]
    fn without_javascript_the_opening_is_also_shown_at_the_audiences_offset() {
        let mut s = status(Phase::NotOpen, Some(3), 0.0);
        s.opens_at = Some("2026-12-01T02:00:00Z".into());
        let mut v = view(Some(&s), Lang::En);
        v.opens_in = Some(60);
        let plain = QueuePage::default().render(&v);
        assert!(plain.contains("<p id=\"opens-at-local\" class=\"small\" dir=\"ltr\"></p>"), "none set: queue.js fills it: {plain}");
        for (offset, want) in [("+08:00", "2026-12-01 10:00 (UTC+08:00)"), ("-05:30", "2026-11-30 20:30 (UTC-05:30)"), ("+00:00", "2026-12-01 02:00 (UTC+00:00)")] {
            let cfg = QueuePageConfig { utc_offset: Some(offset.into()), ..Default::default() };
            let html = QueuePage::compile(&cfg, &|p| PathBuf::from(p)).unwrap().render(&v);
            assert!(html.contains(&format!("dir=\"ltr\">{want}</p>")), "{offset}: {html}");
            assert!(html.contains("Opens at 2026-12-01 02:00 (UTC)"), "UTC stays");
        }
        for bad in ["+8", "08:00", "+14:30", "+08:60", "+08:00Z", "", "-99:00", "+０8:00"] {
            assert_eq!(parse_offset(bad), None, "{bad}");
        }
        assert_eq!((parse_offset("+14:00"), parse_offset("-03:30")), (Some(840), Some(-210)));
    }

    #[test]
    fn sold_out_closed_and_the_bot_check_read_right() {
        let page = QueuePage::default();
        let s = status(Phase::SoldOut, None, 0.0);
        let html = page.render(&view(Some(&s), Lang::Ko));
        assert!(html.contains("<h1 id=\"headline\">매진</h1>") && !html.contains("http-equiv"), "{html}");
        assert!(html.contains("data-state=\"sold_out\" hidden>"), "{html}");
        let html = page.render(&view(None, Lang::ZhTw));
        assert!(html.contains("安全驗證") && html.contains("請開啟 JavaScript"), "{html}");
        let paused = status(Phase::Paused, Some(10), 5.0);
        let html = page.render(&view(Some(&paused), Lang::En));
        assert!(html.contains("<dd id=\"eta\">on hold while paused</dd>") && html.contains("<p class=\"small\" id=\"rate\"></p>"), "{html}");
    }

    #[test]
    fn an_operator_template_brands_the_page_and_bad_settings_are_config_errors() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ok.html"), "<html lang={{lang}}><head>{{head}}<title>{{title}}</title></head><body><h2>{{brand}}</h2>{{logo}}{{queue}}</body></html>").unwrap();
        std::fs::write(dir.path().join("bad.html"), "<html><head>{{head}}</head><body>{{queu}}</body></html>").unwrap();
        let resolve = |p: &str| dir.path().join(p);
        let mut cfg = QueuePageConfig {
            template: Some("ok.html".into()),
            event_name: Some("Summer <Tour>".into()),
            logo_url: Some("/img/logo.png".into()),
            colours: QueuePageColours { accent: Some("#0a7".into()), ..Default::default() },
            text: BTreeMap::from([("en".into(), BTreeMap::from([("title_waiting".into(), "Hold tight".into())]))]),
            utc_offset: None,
        };
        let page = QueuePage::compile(&cfg, &resolve).unwrap();
        let s = status(Phase::Waiting, Some(5), 10.0);
        let html = page.render(&view(Some(&s), Lang::En));
        assert!(html.contains("<h2>Summer &lt;Tour&gt;</h2>") && html.contains("<img class=\"logo\" src=\"/img/logo.png\""), "{html}");
        assert!(html.contains("<title>Hold tight · Summer &lt;Tour&gt;</title>") && html.contains("--accent:#0a7;"), "{html}");
        assert!(html.contains("\"title_waiting\":\"Hold tight\""), "the script gets the overrides too: {html}");

        cfg.template = Some("bad.html".into());
        cfg.colours.background = Some("red".into());
        cfg.logo_url = Some("javascript:alert(1)".into());
        cfg.text.insert("fr-CA".into(), BTreeMap::new());
        cfg.text.insert("ru".into(), BTreeMap::from([("eta_minutes#two".into(), "{a}".into()), ("eta_minutes#few".into(), "около {a} минут".into())]));
        cfg.text.insert("ko".into(), BTreeMap::from([("nope".into(), "x".into()), ("rate_many".into(), "{s}".into())]));
        let issues = QueuePage::compile(&cfg, &resolve).unwrap_err();
        let paths: Vec<_> = issues.iter().map(|i| i.path.as_str()).collect();
        assert!(!paths.contains(&"edge.queue-page.text.ru.eta_minutes#few"), "{issues:?}");
        for p in [
            "edge.queue-page.template",
            "edge.queue-page.colours.background",
            "edge.queue-page.logo-url",
            "edge.queue-page.text.fr-CA",
            "edge.queue-page.text.ru.eta_minutes#two",
            "edge.queue-page.text.ko.nope",
            "edge.queue-page.text.ko.rate_many",
        ] {
            assert!(paths.contains(&p), "{p} in {issues:?}");
        }
        assert!(issues.iter().any(|i| i.message.contains("{{queue}}")), "{issues:?}");
        cfg.utc_offset = Some("+8".into());
        let issues = QueuePage::compile(&cfg, &resolve).unwrap_err();
        assert!(issues.iter().any(|i| i.path == "edge.queue-page.utc-offset"), "{issues:?}");
        cfg.utc_offset = None;
        cfg.template = Some("missing.html".into());
        let issues = QueuePage::compile(&cfg, &resolve).unwrap_err();
        assert!(issues.iter().any(|i| i.path == "edge.queue-page.template" && i.message.contains("cannot read")), "{issues:?}");
    }
}
