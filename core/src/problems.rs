//! Every shape problem of a document at once, each with its path, where serde stops at the first.
//!
//! A config file or an event body with three mistakes should cost its author one round, not three. Serde's
//! derived `Deserialize` gives up at the first wrong type, unknown key or missing field, so [`collect`] reads
//! the document again and again: each time it notes the problem serde found (with its path, from
//! `serde_path_to_error` or the reader's own path), puts a stand-in that reads in place of a wrong or missing
//! value (or, when none reads, takes the offending key out), and tries once more, until the rest reads
//! cleanly. A "missing field" that only follows from a key it took out is not reported twice. The TOML
//! readers add the line and column of each problem ([`locate`]) and turn "unknown field ..., expected one of
//! ..." into the nearest valid key ([`nearest`]).
//!
//! The document as read with its stand-ins goes on to the semantic checks (`validate()`), so one pass names
//! type, missing and rule problems together: a limit without `path` and with a wrong `key` still has its
//! `rate` checked. A stand-in keeps the key present (a wrong `capacity` is not also "needs capacity or
//! seats"), and what the checks say about a value that was itself wrong is left out ([`within`]).

use serde::de::DeserializeOwned;

/// One problem: where (`edge.limits[0].rate`; empty for the document itself) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub path: String,
    pub message: String,
}

/// One step of a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seg {
    Key(String),
    Index(usize),
}

/// `a.b[0].c`.
pub fn display(path: &[Seg]) -> String {
    let mut out = String::new();
    for s in path {
        match s {
            Seg::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// Parses `a.b[0].c` back into steps (keys never contain `.` or `[` in our documents).
pub fn parse_path(path: &str) -> Vec<Seg> {
    let mut out = Vec::new();
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let (key, rest) = part.split_once('[').map_or((part, ""), |(k, r)| (k, r));
        if !key.is_empty() {
            out.push(Seg::Key(key.to_owned()));
        }
        for idx in rest.split('[') {
            if let Ok(i) = idx.trim_end_matches(']').parse() {
                out.push(Seg::Index(i));
            }
        }
    }
    out
}

/// A document tree a problem's key can be taken out of (and a stand-in put back).
pub trait Tree: Clone {
    /// Removes the value at `path` (its last step a key); false when there is none.
    fn remove(&mut self, path: &[Seg]) -> bool;
    /// Sets the value at `path` (its last step a key, its parent a table), in the key's place when it is
    /// there (so that a reader going in order meets it where it met the old value); false when there is
    /// no such table.
    fn insert(&mut self, path: &[Seg], value: Self) -> bool;
    /// A string value (a stand-in for an enum: one of the values its error message names).
    fn text(s: &str) -> Self;
    /// Stand-ins for a wrong or missing value, tried in order until one reads, so that reading goes on
    /// past it to the rest of the document.
    fn stand_ins() -> Vec<Self>;
}

/// The table at `path` in a TOML value.
fn toml_table_at<'a>(mut cur: &'a mut toml::Value, path: &[Seg]) -> Option<&'a mut toml::map::Map<String, toml::Value>> {
    for s in path {
        cur = match (s, cur) {
            (Seg::Key(k), toml::Value::Table(t)) => t.get_mut(k)?,
            (Seg::Index(i), toml::Value::Array(a)) => a.get_mut(*i)?,
            _ => return None,
        };
    }
    match cur {
        toml::Value::Table(t) => Some(t),
        _ => None,
    }
}

impl Tree for toml::Value {
    fn remove(&mut self, path: &[Seg]) -> bool {
        let Some((Seg::Key(last), parent)) = path.split_last() else { return false };
        toml_table_at(self, parent).is_some_and(|t| t.remove(last).is_some())
    }

    fn insert(&mut self, path: &[Seg], value: Self) -> bool {
        let Some((Seg::Key(last), parent)) = path.split_last() else { return false };
        toml_table_at(self, parent).map(|t| t.insert(last.clone(), value)).is_some()
    }

    fn text(s: &str) -> Self {
        toml::Value::String(s.to_owned())
    }

    fn stand_ins() -> Vec<Self> {
        use toml::Value as V;
        vec![
            V::Integer(0),
            V::String(STAND_IN_TIME.into()),
            V::Boolean(false),
            V::Array(Vec::new()),
            V::Table(toml::map::Map::new()),
        ]
    }
}

/// A string stand-in that also reads as a time (RFC 3339).
pub const STAND_IN_TIME: &str = "1970-01-01T00:00:00Z";

/// Reads `T` from `doc` with `read`, which answers the path and message of the first problem; collects every
/// problem by putting a stand-in in place of each wrong or missing value (or taking the offending key out)
/// and reading again (at most 64 rounds). Also answers what the document reads as with those stand-ins (a
/// key taken out at its default), when it reads at all, so that the caller can check the rest too.
pub fn collect<D: Tree, T>(doc: &D, read: impl Fn(D) -> Result<T, (Vec<Seg>, String)>) -> (Option<T>, Vec<Problem>) {
    let mut doc = doc.clone();
    let mut problems = Vec::new();
    let mut removed: Vec<Vec<Seg>> = Vec::new();
    for _ in 0..64 {
        let (path, message) = match read(doc.clone()) {
            Ok(t) => return (Some(t), problems),
            Err(e) => e,
        };
        let missing = missing_field(&message).map(|f| {
            let mut p = path.clone();
            p.push(Seg::Key(f.to_owned()));
            p
        });
        match &missing {
            // A field missing only because a problem of its own was taken out: reported already; a
            // stand-in takes its place so that reading goes on.
            Some(m) if removed.contains(m) => match stand_in(&doc, m, Vec::new(), &read) {
                Some(d) => {
                    doc = d;
                    continue;
                }
                None => break,
            },
            // A field missing from the start is reported at its own path; a stand-in takes its place, so
            // that the rest of its table is still read and checked.
            Some(m) => {
                problems.push(Problem { path: display(m), message });
                if let Some(d) = stand_in(&doc, m, Vec::new(), &read) {
                    doc = d;
                    continue;
                }
            }
            None => {
                let wrong_value = !message.starts_with("unknown field") && matches!(path.last(), Some(Seg::Key(_)));
                let named: Vec<D> = expected_values(&message).into_iter().map(D::text).collect();
                problems.push(Problem { path: display(&path), message });
                // A wrong value: a stand-in (one of the values it names, if the message names any) keeps the
                // key present for the checks of the rest.
                if wrong_value && let Some(d) = stand_in(&doc, &path, named, &read) {
                    doc = d;
                    continue;
                }
            }
        }
        // Take out the innermost key at or above the problem: an unknown key, a value no stand-in replaces,
        // or the table a required key no stand-in fills is missing from. Array elements stay (later indices
        // keep their numbers).
        let Some(cut) = path.iter().rposition(|s| matches!(s, Seg::Key(_))) else { break };
        let target = path[..=cut].to_vec();
        if !doc.remove(&target) {
            break;
        }
        removed.push(target);
    }
    (None, problems)
}

/// `doc` with a stand-in at `at` (`first`, then [`Tree::stand_ins`]) past which reading goes on: the read
/// succeeds, or its first problem lies outside `at`. `None` when no stand-in does.
fn stand_in<D: Tree, T>(
    doc: &D,
    at: &[Seg],
    first: Vec<D>,
    read: &impl Fn(D) -> Result<T, (Vec<Seg>, String)>,
) -> Option<D> {
    for v in first.into_iter().chain(D::stand_ins()) {
        let mut d = doc.clone();
        if !d.insert(at, v) {
            return None;
        }
        match read(d.clone()) {
            Ok(_) => return Some(d),
            Err((p, _)) if !p.starts_with(at) => return Some(d),
            Err(_) => {}
        }
    }
    None
}

/// The values serde's "unknown variant `x`, expected one of `a`, `b`" names (`a`, `b`); none for other
/// messages.
fn expected_values(message: &str) -> Vec<&str> {
    let Some(rest) = message.strip_prefix("unknown variant `") else { return Vec::new() };
    let Some((_, expected)) = rest.split_once("`, expected ") else { return Vec::new() };
    expected.split('`').skip(1).step_by(2).collect()
}

/// Whether a problem at `path` is about the value at `shape` or inside it (`pools[0].capacity` is within
/// `pools[0].capacity` and within `pools[0]`, not within `pools[1]`): what a semantic check says about a
/// value a stand-in replaced adds nothing to the shape problem already reported there.
pub fn within(path: &str, shape: &str) -> bool {
    match path.strip_prefix(shape) {
        Some(rest) => rest.is_empty() || rest.starts_with('.') || rest.starts_with('[') || shape.is_empty(),
        None => false,
    }
}

/// The field name of serde's "missing field `x`".
fn missing_field(message: &str) -> Option<&str> {
    message.strip_prefix("missing field `")?.split('`').next()
}

/// Reads `T` from a TOML value (a section of a file), every problem with its path under `base`.
pub fn from_toml<T: DeserializeOwned>(value: &toml::Value, base: &[Seg]) -> Result<T, Vec<Problem>> {
    match read_toml(value, base) {
        (Some(t), ps) if ps.is_empty() => Ok(t),
        (_, ps) => Err(ps),
    }
}

/// [`from_toml`], also answering what the value reads as without the offending keys ([`collect`]).
pub fn read_toml<T: DeserializeOwned>(value: &toml::Value, base: &[Seg]) -> (Option<T>, Vec<Problem>) {
    let read = |v: toml::Value| {
        serde_path_to_error::deserialize::<_, T>(v)
            .map_err(|e| (parse_path(&e.path().to_string()), e.into_inner().message().trim().to_owned()))
    };
    let (t, ps) = collect(value, read);
    let ps = ps
        .into_iter()
        .map(|p| {
            let mut path = base.to_vec();
            path.extend(parse_path(&p.path));
            Problem { path: display(&path), message: nearest(&p.message) }
        })
        .collect();
    (t, ps)
}

/// "unknown field `lissen`, expected one of `listen`, ..." → "unknown key `lissen`; did you mean `listen`?"
/// (the whole list only when no key is close). Other messages are returned as they are.
pub fn nearest(message: &str) -> String {
    let Some(rest) = message.strip_prefix("unknown field `") else { return message.to_owned() };
    let Some((unknown, rest)) = rest.split_once('`') else { return message.to_owned() };
    let valid: Vec<&str> = rest.split('`').skip(1).step_by(2).collect();
    let best = valid.iter().map(|v| (edit_distance(unknown, v), *v)).min();
    match best {
        Some((d, v)) if d <= unknown.len().max(3) / 3 + 1 => format!("unknown key `{unknown}`; did you mean `{v}`?"),
        _ if valid.is_empty() => format!("unknown key `{unknown}`: this table takes no keys"),
        _ => format!("unknown key `{unknown}` (valid keys: {})", valid.join(", ")),
    }
}

/// Levenshtein distance over chars.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == *cb { prev } else { 1 + prev.min(cur).min(row[j]) };
            prev = cur;
        }
    }
    row[b.len()]
}

/// Line and column (1-based) of the value at `path` in a TOML text: the key's own position when the path
/// ends in a key, the element's when it ends in an index; for a path the text does not hold (a missing
/// key), the deepest part that it does. `None` when not even the first step is there.
pub fn locate(text: &str, path: &[Seg]) -> Option<(usize, usize)> {
    use toml_edit::{Item, Value};
    enum At<'a> {
        Item(&'a Item),
        Table(&'a toml_edit::Table),
        Value(&'a Value),
    }
    let doc = toml_edit::ImDocument::parse(text).ok()?;
    let mut at = At::Table(doc.as_table());
    let mut span = None;
    for s in path {
        let table = match at {
            At::Table(t) | At::Item(Item::Table(t)) => Some(t),
            _ => None,
        };
        let inline = match at {
            At::Item(Item::Value(Value::InlineTable(t))) | At::Value(Value::InlineTable(t)) => Some(t),
            _ => None,
        };
        let next = match s {
            Seg::Key(k) => table
                .and_then(|t| t.get_key_value(k))
                .or_else(|| inline.and_then(|t| t.get_key_value(k)))
                .map(|(key, it)| (At::Item(it), key.span())),
            Seg::Index(i) => match at {
                At::Item(Item::ArrayOfTables(a)) => a.get(*i).map(|t| (At::Table(t), t.span())),
                At::Item(Item::Value(Value::Array(a))) | At::Value(Value::Array(a)) => {
                    a.get(*i).map(|v| (At::Value(v), v.span()))
                }
                _ => None,
            },
        };
        let Some((next, sp)) = next else { break };
        at = next;
        span = sp.or(span);
    }
    let start = span?.start.min(text.len());
    let before = &text[..start];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    Some((line, col))
}

/// Adds " (line L, column C)" to each problem the text can place, and puts them in the text's order.
pub fn with_lines(text: &str, problems: Vec<Problem>) -> Vec<Problem> {
    let mut placed: Vec<(Option<(usize, usize)>, Problem)> = problems
        .into_iter()
        .map(|p| {
            let at = locate(text, &parse_path(&p.path));
            match at {
                Some((l, c)) => (at, Problem { message: format!("{} (line {l}, column {c})", p.message), ..p }),
                None => (None, p),
            }
        })
        .collect();
    placed.sort_by_key(|(at, _)| at.unwrap_or((usize::MAX, 0)));
    placed.into_iter().map(|(_, p)| p).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "kebab-case")]
    #[allow(dead_code)]
    struct Cfg {
        #[serde(default)]
        threads: usize,
        #[serde(default)]
        keepalive_seconds: u64,
        name: String,
        #[serde(default)]
        limits: Vec<Limit>,
        #[serde(default)]
        inner: Option<Inner>,
    }
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Limit {
        rate: u32,
        #[serde(default)]
        burst: u32,
    }
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Inner {
        a: u8,
    }

    const TEXT: &str = "threads = \"four\"\nkeepalive-secondz = 5\nname = \"x\"\n\n[[limits]]\nrate = 1\n\n[[limits]]\nrate = -1\nburst = \"b\"\n\n[inner]\na = 300\n";

    fn problems(text: &str) -> Vec<Problem> {
        let v: toml::Value = toml::from_str(text).unwrap();
        with_lines(text, from_toml::<Cfg>(&v, &[]).unwrap_err())
    }

    #[test]
    fn every_problem_comes_with_its_path_line_and_the_nearest_key() {
        let ps = problems(TEXT);
        let got: Vec<(&str, &str)> = ps.iter().map(|p| (p.path.as_str(), p.message.as_str())).collect();
        assert_eq!(
            got,
            vec![
                ("threads", "invalid type: string \"four\", expected usize (line 1, column 1)"),
                ("keepalive-secondz", "unknown key `keepalive-secondz`; did you mean `keepalive-seconds`? (line 2, column 1)"),
                ("limits[1].rate", "invalid value: integer `-1`, expected u32 (line 9, column 1)"),
                ("limits[1].burst", "invalid type: string \"b\", expected u32 (line 10, column 1)"),
                ("inner.a", "invalid value: integer `300`, expected u8 (line 13, column 1)"),
            ],
            "{ps:#?}"
        );
    }

    #[test]
    fn a_missing_field_is_reported_once_and_the_rest_still_read() {
        let ps = problems("threads = 1\n[inner]\n");
        assert_eq!(ps.iter().map(|p| p.path.as_str()).collect::<Vec<_>>(), vec!["inner.a", "name"], "{ps:#?}");
        assert!(ps[1].message.starts_with("missing field `name`"), "{ps:#?}");
        assert!(ps[0].message.starts_with("missing field `a`") && ps[0].message.contains("line 2"), "{ps:#?}");
        // A wrong required value is one problem, not also "missing".
        let ps = problems("name = 5\n");
        assert_eq!(ps.len(), 1, "{ps:#?}");
        assert_eq!(ps[0].path, "name");
        // ... and reading goes on past it (a stand-in takes its place) to the problems after it.
        let ps = problems("name = 5\nthreads = \"x\"\n[inner]\na = -1\n");
        assert_eq!(ps.iter().map(|p| p.path.as_str()).collect::<Vec<_>>(), vec!["name", "threads", "inner.a"], "{ps:#?}");
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Rules {
        #[serde(default)]
        rules: Vec<Rule>,
    }
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Rule {
        path: String,
        key: Key,
        rate: String,
        #[serde(default)]
        cap: Option<u64>,
    }
    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "kebab-case")]
    enum Key {
        Ip,
        User,
    }

    /// A missing field, a wrong enum value and a wrong optional value of one array element are each
    /// reported, and the element still reads (with stand-ins) so that its other values reach the checks:
    /// the element is not dropped, `rate` is kept as written, and `cap` stays present.
    #[test]
    fn stand_ins_keep_the_rest_of_a_table_for_the_checks() {
        let v: toml::Value = toml::from_str("[[rules]]\nkey = \"face\"\nrate = \"ten per second\"\ncap = -1\n").unwrap();
        let (read, ps) = read_toml::<Rules>(&v, &[]);
        let mut paths: Vec<&str> = ps.iter().map(|p| p.path.as_str()).collect();
        paths.sort_unstable();
        assert_eq!(paths, ["rules[0].cap", "rules[0].key", "rules[0].path"], "{ps:#?}");
        let read = read.expect("the rest reads");
        assert_eq!(read.rules.len(), 1);
        assert_eq!(read.rules[0].rate, "ten per second");
        assert_eq!(read.rules[0].key, Key::Ip, "the first value the error names stands in");
        assert!(read.rules[0].cap.is_some());
    }

    #[test]
    fn within_means_the_same_value_or_inside_it() {
        assert!(within("pools[0].capacity", "pools[0].capacity"));
        assert!(within("pools[0].capacity", "pools[0]"));
        assert!(within("pools[0]", "pools"));
        assert!(!within("pools[0]", "pools[0].capacity"));
        assert!(!within("pools[10]", "pools[1]"));
        assert!(!within("skus[0].pools[0]", "pools"));
    }

    #[test]
    fn a_far_key_lists_the_valid_ones() {
        let m = nearest("unknown field `zzzzzzzz`, expected one of `listen`, `threads`");
        assert_eq!(m, "unknown key `zzzzzzzz` (valid keys: listen, threads)");
        assert_eq!(nearest("unknown field `lissen`, expected `listen`"), "unknown key `lissen`; did you mean `listen`?");
        assert_eq!(nearest("invalid type"), "invalid type");
    }

    #[test]
    fn paths_round_trip() {
        for p in ["a", "a.b[0].c", "limits[12]", "x[1][2].y"] {
            assert_eq!(display(&parse_path(p)), p);
        }
    }
}
