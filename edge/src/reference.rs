//! The configuration reference (docs/src/reference/), generated from the config types themselves.
//!
//! Each config struct derives `schemars::JsonSchema`, which reads what serde reads (kebab-case names,
//! renames, `default`s, the container's `Default`) and the fields' doc comments; this module walks
//! those schemas and writes one Markdown page per part of the file: the top level and the core's
//! tables ([`wicket_core::config::CoreConfig`]), `[edge]` ([`crate::config::EdgeConfig`]) and
//! `[[rooms]]` ([`crate::room::config::RoomConfig`]). So a key is described once, next to its field,
//! and `tests/config_reference.rs` fails when the committed pages differ from what this generates
//! (`wicket config-reference docs/src/reference` writes them again).

use std::fmt::Write as _;

use schemars::generate::SchemaSettings;
use schemars::JsonSchema;
use serde_json::{Map, Value};

/// The command that regenerates the pages; named in each page and in the test's failure.
pub const REGENERATE: &str = "cargo run -p wicket-edge --bin wicket -- config-reference docs/src/reference";

/// One generated page: its file name under docs/src/reference/ and its text.
pub struct Page {
    /// File name, e.g. `edge.md`.
    pub file: &'static str,
    /// The Markdown.
    pub text: String,
}

/// Every page of the configuration reference.
pub fn pages() -> Vec<Page> {
    vec![
        page::<wicket_core::config::CoreConfig>(
            "core.md",
            "Top level and the core's tables",
            "",
            "The keys outside `[edge]` and `[[rooms]]`: the sale core's (`wicket-core serve`, `wicket core`, and \
             `wicket serve` with `edge.core = \"embedded\"`), and the ones the edge reads too (`admin-token`, \
             `store` for the rooms' state, `[tokens]`). The core refuses unknown keys.",
        ),
        page::<crate::config::EdgeConfig>(
            "edge.md",
            "The `[edge]` section",
            "edge",
            "The edge (`wicket serve`) reads `[edge]` strictly: an unknown key is an error. The core ignores it.",
        ),
        page::<crate::room::config::RoomConfig>(
            "rooms.md",
            "Waiting rooms: `[[rooms]]`",
            "rooms",
            "One `[[rooms]]` table per waiting room. The same fields make the JSON body of \
             `PUT /admin/rooms/<room>` ([HTTP API](../api.md), in snake_case).",
        ),
    ]
}

fn page<T: JsonSchema>(file: &'static str, title: &str, root: &str, intro: &str) -> Page {
    let generator = SchemaSettings::draft2020_12().into_generator();
    let schema = generator.into_root_schema_for::<T>();
    let defs = schema.get("$defs").and_then(Value::as_object).cloned().unwrap_or_default();
    let mut w = Writer { defs, out: String::new() };
    let _ = writeln!(w.out, "# {title}\n");
    let _ = writeln!(
        w.out,
        "<!-- Generated from the config types (doc comments, serde names, defaults): do not edit. \
         Regenerate with `{REGENERATE}`. -->\n"
    );
    let _ = writeln!(w.out, "{intro}\n");
    if root.is_empty() {
        let _ = writeln!(w.out, "## Top-level keys\n");
    }
    w.table(root, schema.as_value(), root == "rooms");
    Page { file, text: w.out }
}

struct Writer {
    defs: Map<String, Value>,
    out: String,
}

impl Writer {
    /// `$ref` followed, `Option<T>`'s `anyOf [T, null]` reduced to `T`.
    fn resolve<'a>(&'a self, mut s: &'a Value) -> &'a Value {
        loop {
            if let Some(r) = s.get("$ref").and_then(Value::as_str) {
                let name = r.trim_start_matches("#/$defs/");
                match self.defs.get(name) {
                    Some(d) => {
                        s = d;
                        continue;
                    }
                    None => return s,
                }
            }
            if let Some(any) = s.get("anyOf").and_then(Value::as_array) {
                let non_null: Vec<&Value> = any.iter().filter(|v| v.get("type") != Some(&"null".into())).collect();
                if non_null.len() == 1 && any.len() == 2 {
                    s = non_null[0];
                    continue;
                }
            }
            return s;
        }
    }

    fn is_table(&self, s: &Value) -> bool {
        self.resolve(s).get("properties").is_some()
    }

    /// The element schema when `s` is an array of tables.
    fn array_of_tables<'a>(&'a self, s: &'a Value) -> Option<&'a Value> {
        let s = self.resolve(s);
        let items = s.get("items")?;
        self.is_table(items).then_some(items)
    }

    /// One table's section: its keys in a table, then its sub-tables, each in its own section.
    fn table(&mut self, path: &str, schema: &Value, array: bool) {
        let schema = self.resolve(schema).clone();
        let props = schema.get("properties").and_then(Value::as_object).cloned().unwrap_or_default();
        let required: Vec<&str> =
            schema.get("required").and_then(Value::as_array).map(|r| r.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
        if !path.is_empty() {
            let heading = if array { format!("[[{path}]]") } else { format!("[{path}]") };
            let _ = writeln!(self.out, "## `{heading}`\n");
            // A description that only names the table again adds nothing.
            if let Some(d) = description(&schema) {
                let d = d.strip_prefix(&format!("`{heading}`: ")).unwrap_or(&d);
                if d.trim() != format!("`{heading}`.") {
                    let _ = writeln!(self.out, "{}\n", upper_first(&unlink(d)));
                }
            }
        }
        let mut subs = Vec::new();
        let mut rows = String::new();
        // Keys in alphabetical order, whatever order serde_json's map keeps (its `preserve_order`
        // feature, turned on by any crate of the build, would keep the schema's).
        let mut keys: Vec<(&String, &Value)> = props.iter().collect();
        keys.sort_by(|a, b| a.0.cmp(b.0));
        for (key, field) in keys {
            let sub = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
            if self.is_table(field) {
                subs.push((sub, field.clone(), false));
                continue;
            }
            if let Some(items) = self.array_of_tables(field) {
                subs.push((sub, items.clone(), true));
                continue;
            }
            let default = match field.get("default") {
                Some(Value::Null) => "none".into(),
                Some(v) => format!("`{}`", toml_literal(v)),
                None if required.contains(&key.as_str()) => "required".into(),
                None => "none".into(),
            };
            let doc = description(field).or_else(|| description(self.resolve(field))).unwrap_or_default();
            let _ = writeln!(rows, "| `{key}` | {} | {default} | {} |", self.type_name(field), cell(&doc));
        }
        if !rows.is_empty() {
            let _ = writeln!(self.out, "| key | type | default | meaning |\n|---|---|---|---|\n{rows}");
        }
        for (sub, field, array) in subs {
            let doc = description(&field);
            // A field's own doc says what the table is for; show it when the table's type has none.
            let mut s = self.resolve(&field).clone();
            if description(&s).is_none() {
                if let (Some(d), Some(o)) = (doc, s.as_object_mut()) {
                    o.insert("description".into(), d.into());
                }
            }
            self.table(&sub, &s, array);
        }
    }

    /// A key's type in TOML words, with its range when the type narrows it.
    fn type_name(&self, s: &Value) -> String {
        let s = self.resolve(s);
        if let Some(c) = s.get("const") {
            return format!("`{}`", toml_literal(c));
        }
        if let Some(e) = s.get("enum").and_then(Value::as_array) {
            return e.iter().map(|v| format!("`{}`", toml_literal(v))).collect::<Vec<_>>().join(" \\| ");
        }
        for key in ["oneOf", "anyOf"] {
            if let Some(alts) = s.get(key).and_then(Value::as_array) {
                let names: Vec<String> =
                    alts.iter().filter(|v| v.get("type") != Some(&"null".into())).map(|v| self.type_name(v)).collect();
                return names.join(" \\| ");
            }
        }
        let types: Vec<&str> = match s.get("type") {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).filter(|t| *t != "null").collect(),
            _ => vec![],
        };
        let mut names = Vec::new();
        for t in types {
            names.push(match t {
                "array" => match s.get("items") {
                    Some(items) => format!("array of {}", self.type_name(items)),
                    None => "array".into(),
                },
                "integer" => format!("integer{}", range(s)),
                "number" => format!("number{}", range(s)),
                "object" => "table".into(),
                other => other.to_owned(),
            });
        }
        if names.is_empty() { "any".into() } else { names.join(" \\| ") }
    }
}

/// ` (lo..=hi)` when the schema narrows an integer below what its storage holds.
fn range(s: &Value) -> String {
    let lo = s.get("minimum").and_then(Value::as_f64);
    let hi = s.get("maximum").and_then(Value::as_f64);
    let full = |lo: f64, hi: f64| {
        matches!(s.get("format").and_then(Value::as_str), Some("uint8")) && (lo, hi) == (0.0, 255.0)
            || matches!(s.get("format").and_then(Value::as_str), Some("uint16")) && (lo, hi) == (0.0, 65535.0)
    };
    match (lo, hi) {
        (Some(lo), Some(hi)) if !full(lo, hi) => format!(" ({lo}..={hi})"),
        (Some(lo), None) if lo > 0.0 => format!(" (≥ {lo})"),
        _ => String::new(),
    }
}

/// A doc comment's text: schemars puts a lone first line in `title`, the rest in `description`. A
/// title without a space is the type's name (the root's), not documentation.
fn description(s: &Value) -> Option<String> {
    let t = s.get("title").and_then(Value::as_str).filter(|t| t.contains(' '));
    let d = s.get("description").and_then(Value::as_str);
    match (t, d) {
        (Some(t), Some(d)) => Some(format!("{t}\n\n{d}")),
        (Some(x), None) | (None, Some(x)) => Some(x.to_owned()),
        (None, None) => None,
    }
}

/// Rustdoc's intra-doc links (`` [`SpreadConfig`] ``) as plain code: they point into the source.
fn unlink(doc: &str) -> String {
    let mut out = String::with_capacity(doc.len());
    let mut rest = doc;
    while let Some(i) = rest.find("[`") {
        let Some(j) = rest[i..].find("`]") else { break };
        let after = &rest[i + j + 2..];
        if after.starts_with('(') || after.starts_with('[') {
            out.push_str(&rest[..i + j + 2]);
        } else {
            out.push_str(&rest[..i]);
            out.push_str(&rest[i + 1..i + j + 1]);
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

fn upper_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) if f.is_lowercase() => f.to_uppercase().chain(c).collect(),
        _ => s.to_owned(),
    }
}

/// Text for one table cell: one line, pipes escaped, paragraphs kept apart.
fn cell(doc: &str) -> String {
    unlink(doc)
        .split("\n\n")
        .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("<br><br>")
        .replace('|', "\\|")
}

/// A JSON value as it is written in TOML.
fn toml_literal(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Array(a) => format!("[{}]", a.iter().map(toml_literal).collect::<Vec<_>>().join(", ")),
        Value::Object(o) => {
            format!("{{ {} }}", o.iter().map(|(k, v)| format!("{k} = {}", toml_literal(v))).collect::<Vec<_>>().join(", "))
        }
        Value::Null => "none".into(),
        other => other.to_string(),
    }
}
