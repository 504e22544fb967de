//! The edge's modules import each other without a circle: read from the `use` lines and the
//! `crate::` / `super::` / `self::` paths of every file under edge/src, the file-to-file graph has no
//! cycle, so a change to one part's settings or code does not reach back into the parts it uses.
//!
//! Each part owns its config section (`limit::LimitRule`, `bot::BotConfig`, ...) and
//! [`wicket_edge::config`] only composes them: the config module imports the parts, never the other
//! way round.
//!
//! `cargo nextest run -p wicket-edge --test structure`

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Cycles known to remain, each by its files (module paths, sorted). The test fails on any other
/// cycle, and on a listed one that is gone (so the list only shrinks). None remain.
const KNOWN_CYCLES: &[&[&str]] = &[];

/// One `.rs` file of the crate, by its module path (`room::http`; `crate` for lib.rs).
struct SourceFile {
    module: Vec<String>,
    text: String,
}

fn module_of(rel: &Path) -> Option<Vec<String>> {
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop()?;
    let stem = last.strip_suffix(".rs")?;
    match stem {
        "lib" if parts.is_empty() => {}
        // The binary is a crate of its own: its `wicket_edge::` paths are not imports inside the library.
        "main" if parts.is_empty() => return None,
        "mod" => {}
        _ => parts.push(stem.to_owned()),
    }
    Some(parts)
}

fn read_sources(dir: &Path, root: &Path, out: &mut Vec<SourceFile>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            read_sources(&p, root, out);
        } else if p.extension().is_some_and(|e| e == "rs")
            && let Some(module) = module_of(p.strip_prefix(root).unwrap())
        {
            out.push(SourceFile { module, text: std::fs::read_to_string(&p).unwrap() });
        }
    }
}

/// A token of Rust source, as far as paths need: identifiers and the punctuation around them.
#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    PathSep,
    Open,
    Close,
    Comma,
    Semi,
    Star,
    Other,
}

/// Splits source into [`Tok`]s, dropping comments, string, byte-string, raw-string and char literals
/// (so doc links and text never count as imports).
fn lex(src: &str) -> Vec<Tok> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if (c == b'r' || (c == b'b' && b.get(i + 1) == Some(&b'r')))
            && {
                let j = if c == b'b' { i + 2 } else { i + 1 };
                let mut k = j;
                while b.get(k) == Some(&b'#') {
                    k += 1;
                }
                b.get(k) == Some(&b'"') && (i == 0 || !is_ident_byte(b[i - 1]))
            }
        {
            let mut k = if c == b'b' { i + 2 } else { i + 1 };
            let mut hashes = 0;
            while b[k] == b'#' {
                hashes += 1;
                k += 1;
            }
            k += 1;
            let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
            while k < b.len() && !b[k..].starts_with(&close) {
                k += 1;
            }
            i = k + close.len();
            out.push(Tok::Other);
        } else if c == b'"' || (c == b'b' && b.get(i + 1) == Some(&b'"') && (i == 0 || !is_ident_byte(b[i - 1]))) {
            i += if c == b'b' { 2 } else { 1 };
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push(Tok::Other);
        } else if c == b'\'' {
            // A char literal ('a', '\n', '\u{1F600}') or a lifetime ('a, 'static).
            if b.get(i + 1) == Some(&b'\\') {
                i += 2;
                while i < b.len() && b[i] != b'\'' {
                    i += 1;
                }
                i += 1;
            } else {
                let ch_len = src[i + 1..].chars().next().map_or(1, char::len_utf8);
                if b.get(i + 1 + ch_len) == Some(&b'\'') {
                    i += 2 + ch_len;
                } else {
                    i += 1;
                    while i < b.len() && is_ident_byte(b[i]) {
                        i += 1;
                    }
                }
            }
            out.push(Tok::Other);
        } else if is_ident_byte(c) && !c.is_ascii_digit() {
            let start = i;
            while i < b.len() && is_ident_byte(b[i]) {
                i += 1;
            }
            out.push(Tok::Ident(src[start..i].to_owned()));
        } else if c == b':' && b.get(i + 1) == Some(&b':') {
            out.push(Tok::PathSep);
            i += 2;
        } else {
            out.push(match c {
                b'{' => Tok::Open,
                b'}' => Tok::Close,
                b',' => Tok::Comma,
                b';' => Tok::Semi,
                b'*' => Tok::Star,
                _ => Tok::Other,
            });
            i += if c.is_ascii() { 1 } else { src[i..].chars().next().map_or(1, char::len_utf8) };
        }
    }
    out
}

fn is_ident_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// A path as written, and the module it was written in (the file's module plus inline `mod x { }`).
struct WrittenPath {
    scope: Vec<String>,
    segments: Vec<String>,
    /// From a `pub use`, the name it binds (a re-export: `M::name` names what the path does).
    reexport: Option<String>,
}

/// The use-tree after `use` at `toks[*i]`, flattened into full paths (`a::{b, c::d}` → `a::b`, `a::c::d`),
/// each with the name it binds (its last segment, or the name after `as`).
fn use_tree(toks: &[Tok], i: &mut usize, prefix: Vec<String>, out: &mut Vec<(Vec<String>, String)>) {
    let mut path = prefix;
    let mut alias = None;
    loop {
        match toks.get(*i) {
            Some(Tok::Ident(s)) if s == "as" => {
                if let Some(Tok::Ident(a)) = toks.get(*i + 1) {
                    alias = Some(a.clone());
                }
                *i += 2;
            }
            Some(Tok::Ident(s)) => {
                path.push(s.clone());
                *i += 1;
            }
            Some(Tok::PathSep) => *i += 1,
            Some(Tok::Star) => *i += 1,
            Some(Tok::Open) => {
                *i += 1;
                loop {
                    use_tree(toks, i, path.clone(), out);
                    match toks.get(*i) {
                        Some(Tok::Comma) => *i += 1,
                        Some(Tok::Close) => {
                            *i += 1;
                            break;
                        }
                        _ => break,
                    }
                    if toks.get(*i) == Some(&Tok::Close) {
                        *i += 1;
                        break;
                    }
                }
                return;
            }
            _ => {
                let bound = alias.unwrap_or_else(|| path.last().cloned().unwrap_or_default());
                out.push((path, bound));
                return;
            }
        }
    }
}

/// Every path a file writes that may name a module of this crate, and the modules it declares
/// (`mod x;` → its children).
fn written_paths(file: &SourceFile) -> (Vec<WrittenPath>, BTreeSet<Vec<String>>) {
    let toks = lex(&file.text);
    let mut paths = Vec::new();
    let mut children = BTreeSet::new();
    // Inline modules open at brace depth n: (name, n).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    let scope_of = |inline: &[(String, usize)]| {
        let mut s = file.module.clone();
        s.extend(inline.iter().map(|(n, _)| n.clone()));
        s
    };
    while i < toks.len() {
        match &toks[i] {
            Tok::Open => {
                depth += 1;
                i += 1;
            }
            Tok::Close => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
                i += 1;
            }
            Tok::Ident(k) if k == "mod" => {
                match (toks.get(i + 1), toks.get(i + 2)) {
                    (Some(Tok::Ident(name)), Some(Tok::Semi)) => {
                        let mut m = scope_of(&inline);
                        m.push(name.clone());
                        children.insert(m);
                    }
                    (Some(Tok::Ident(name)), Some(Tok::Open)) => {
                        depth += 1;
                        inline.push((name.clone(), depth));
                        i += 3;
                        continue;
                    }
                    _ => {}
                }
                i += 1;
            }
            Tok::Ident(k) if k == "use" => {
                let public = i > 0 && toks[i - 1] == Tok::Ident("pub".into())
                    || (i > 3 && toks[i - 1] == Tok::Other && toks[i - 4] == Tok::Ident("pub".into()));
                i += 1;
                let mut trees = Vec::new();
                use_tree(&toks, &mut i, Vec::new(), &mut trees);
                let scope = scope_of(&inline);
                paths.extend(trees.into_iter().map(|(segments, bound)| WrittenPath {
                    scope: scope.clone(),
                    segments,
                    reexport: public.then_some(bound),
                }));
            }
            Tok::Ident(first) if toks.get(i + 1) == Some(&Tok::PathSep) && (i == 0 || toks[i - 1] != Tok::PathSep) => {
                let mut segments = vec![first.clone()];
                let mut j = i + 1;
                while toks.get(j) == Some(&Tok::PathSep) {
                    match toks.get(j + 1) {
                        Some(Tok::Ident(s)) => segments.push(s.clone()),
                        _ => break,
                    }
                    j += 2;
                }
                paths.push(WrittenPath { scope: scope_of(&inline), segments, reexport: None });
                i = j;
            }
            _ => i += 1,
        }
    }
    (paths, children)
}

/// The crate's import graph, file to file.
struct Graph {
    /// Every file's module path.
    files: BTreeSet<Vec<String>>,
    /// module → modules it imports from (other files only).
    edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
}

fn graph() -> Graph {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut sources = Vec::new();
    read_sources(&root, &root, &mut sources);
    let files: BTreeSet<Vec<String>> = sources.iter().map(|s| s.module.clone()).collect();
    // Each file's module, the paths it writes, and the modules it declares.
    let mut written = Vec::new();
    let mut children = BTreeSet::new();
    for s in &sources {
        let (paths, declared) = written_paths(s);
        children.extend(declared);
        written.push((s.module.clone(), paths));
    }

    // Where a path written in `scope` starts, in absolute segments; None for other crates and locals.
    let absolute = |scope: &[String], segs: &[String]| -> Option<Vec<String>> {
        let first = segs.first()?;
        let (mut base, rest) = match first.as_str() {
            "crate" => (Vec::new(), &segs[1..]),
            "self" => (scope.to_vec(), &segs[1..]),
            "super" => {
                let mut b = scope.to_vec();
                let mut k = 0;
                while segs.get(k).is_some_and(|s| s == "super") {
                    b.pop();
                    k += 1;
                }
                (b, &segs[k..])
            }
            _ => {
                let mut child = scope.to_vec();
                child.push(first.clone());
                if !children.contains(&child) && !files.contains(&child) {
                    return None;
                }
                (scope.to_vec(), segs)
            }
        };
        base.extend(rest.iter().cloned());
        Some(base)
    };

    // Re-exports: `pub use x::Y;` in module M makes `M::Y` name what `x::Y` names.
    let mut reexports: BTreeMap<Vec<String>, Option<Vec<String>>> = BTreeMap::new();
    for (module, paths) in &written {
        for p in paths.iter().filter(|p| &p.scope == module) {
            let Some(name) = &p.reexport else { continue };
            let mut key = module.clone();
            key.push(name.clone());
            reexports.insert(key, absolute(&p.scope, &p.segments));
        }
    }
    // The file an absolute path lands in: its longest prefix that is a file, through re-exports.
    let file_of = |abs: Vec<String>| -> Option<Vec<String>> {
        let mut abs = abs;
        for _ in 0..4 {
            let mut k = abs.len();
            while k > 0 && !files.contains(&abs[..k]) {
                k -= 1;
            }
            let through = (k < abs.len()).then(|| abs[..=k].to_vec()).and_then(|key| reexports.get(&key).cloned());
            match through {
                Some(None) => return None, // a re-export of another crate
                Some(Some(target)) if target != abs[..=k] => {
                    let mut next = target;
                    next.extend(abs[k + 1..].iter().cloned());
                    abs = next;
                }
                _ => return Some(abs[..k].to_vec()),
            }
        }
        None
    };

    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (module, paths) in &written {
        let targets = edges.entry(module.clone()).or_default();
        for p in paths {
            if let Some(target) = absolute(&p.scope, &p.segments).and_then(&file_of)
                && &target != module
            {
                targets.insert(target);
            }
        }
    }
    Graph { files, edges }
}

fn name(m: &[String]) -> String {
    if m.is_empty() { "crate (lib.rs)".into() } else { m.join("::") }
}

/// The strongly connected groups of more than one file (Tarjan), each sorted.
fn cycles(g: &Graph) -> Vec<Vec<Vec<String>>> {
    struct Tarjan<'a> {
        g: &'a Graph,
        index: BTreeMap<Vec<String>, usize>,
        low: BTreeMap<Vec<String>, usize>,
        stack: Vec<Vec<String>>,
        on_stack: BTreeSet<Vec<String>>,
        next: usize,
        out: Vec<Vec<Vec<String>>>,
    }
    impl Tarjan<'_> {
        fn visit(&mut self, v: &Vec<String>) {
            self.index.insert(v.clone(), self.next);
            self.low.insert(v.clone(), self.next);
            self.next += 1;
            self.stack.push(v.clone());
            self.on_stack.insert(v.clone());
            for w in self.g.edges.get(v).into_iter().flatten() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if self.on_stack.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut group = Vec::new();
                loop {
                    let w = self.stack.pop().unwrap();
                    self.on_stack.remove(&w);
                    let done = &w == v;
                    group.push(w);
                    if done {
                        break;
                    }
                }
                if group.len() > 1 {
                    group.sort();
                    self.out.push(group);
                }
            }
        }
    }
    let mut t = Tarjan {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in &g.files {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    t.out
}

/// One circle inside a group, for the message: from its first file back to it.
fn one_circle(g: &Graph, group: &[Vec<String>]) -> String {
    let members: BTreeSet<&Vec<String>> = group.iter().collect();
    let start = &group[0];
    // Breadth-first from start's successors back to start, inside the group.
    let mut prev: BTreeMap<Vec<String>, Vec<String>> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::new();
    for w in g.edges.get(start).into_iter().flatten().filter(|w| members.contains(w)) {
        prev.entry(w.clone()).or_insert_with(|| start.clone());
        queue.push_back(w.clone());
    }
    while let Some(v) = queue.pop_front() {
        if &v == start {
            break;
        }
        for w in g.edges.get(&v).into_iter().flatten().filter(|w| members.contains(w)) {
            if !prev.contains_key(w) {
                prev.insert(w.clone(), v.clone());
                queue.push_back(w.clone());
            }
        }
    }
    let mut path = vec![start.clone()];
    let mut at = prev.get(start).cloned();
    while let Some(v) = at {
        if &v == start {
            break;
        }
        path.push(v.clone());
        at = prev.get(&v).cloned();
    }
    path.push(start.clone());
    path.reverse();
    path.iter().map(|m| name(m)).collect::<Vec<_>>().join(" → ")
}

#[test]
fn no_import_circle_among_edge_files() {
    let g = graph();
    let found = cycles(&g);
    let known: BTreeSet<Vec<String>> = KNOWN_CYCLES.iter().map(|c| c.iter().map(|s| s.to_string()).collect()).collect();
    let mut problems = Vec::new();
    let mut seen_known = BTreeSet::new();
    for group in &found {
        let names: Vec<String> = group.iter().map(|m| name(m)).collect();
        if known.contains(&names) {
            seen_known.insert(names);
            continue;
        }
        problems.push(format!("import circle among {}: {}", names.join(", "), one_circle(&g, group)));
    }
    for k in known.difference(&seen_known) {
        problems.push(format!("the known circle among {} is gone: remove it from KNOWN_CYCLES", k.join(", ")));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_config_module_is_imported_by_no_part_it_composes() {
    let g = graph();
    let config = vec!["config".to_string()];
    // Everything the config module reaches: none of it may import the config module back.
    let mut reach = BTreeSet::new();
    let mut todo: Vec<Vec<String>> = g.edges.get(&config).into_iter().flatten().cloned().collect();
    while let Some(m) = todo.pop() {
        if reach.insert(m.clone()) {
            todo.extend(g.edges.get(&m).into_iter().flatten().cloned());
        }
    }
    let back: Vec<String> =
        reach.iter().filter(|m| g.edges.get(*m).is_some_and(|t| t.contains(&config))).map(|m| name(m)).collect();
    assert!(back.is_empty(), "modules the config module uses import it back: {back:?}");
    for part in ["limit", "blocklist", "anomaly", "bot", "admission", "tls", "room"] {
        assert!(reach.contains(&vec![part.to_string()]), "config does not compose {part}: the check above reads too little");
    }
}

/// The reader itself: a use-tree, a `super::` path in an inline test module, a re-export, a doc link
/// and a string are read as they should be.
#[test]
fn the_reader_sees_what_rust_sees() {
    let src = SourceFile {
        module: vec!["room".into(), "http".into()],
        text: r#"
            //! [`crate::fast`] in a doc link is not an import.
            use crate::{admission::{ProtectedRule, TokensConfig}, check::issue};
            use super::{Phase, config::RoomConfig};
            fn f() { let s = "crate::proxy::X"; let c = '"'; crate::bot::unix_now(); }
            mod tests { use super::*; fn g() { super::super::page::x(); } }
        "#
        .into(),
    };
    let (paths, _) = written_paths(&src);
    let got: Vec<String> = paths.iter().map(|p| format!("{} in {}", p.segments.join("::"), p.scope.join("::"))).collect();
    assert_eq!(
        got,
        [
            "crate::admission::ProtectedRule in room::http",
            "crate::admission::TokensConfig in room::http",
            "crate::check::issue in room::http",
            "super::Phase in room::http",
            "super::config::RoomConfig in room::http",
            "crate::bot::unix_now in room::http",
            "super in room::http::tests",
            "super::super::page::x in room::http::tests",
        ]
    );
}
