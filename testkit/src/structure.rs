//! A crate's import graph and its circles: the structure test every crate of the workspace runs
//! (`tests/structure.rs`), so a change to one part's code does not reach back into the parts it uses.
//!
//! The graph is read from the source, not from the compiler: every `use` line (use-trees flattened,
//! `pub use` re-exports followed to the file that defines the name) and every `crate::` / `super::` /
//! `self::` path in a file's code gives an arrow from that file to the file that path lands in. Comments,
//! doc links and string literals never count. A file's inline `mod tests { use super::*; }` points at its
//! own file, so it is no arrow.
//!
//! ```ignore
//! // tests/structure.rs of a crate
//! #[test]
//! fn no_import_circle() {
//!     wicket_testkit::structure::assert_no_import_cycles(concat!(env!("CARGO_MANIFEST_DIR"), "/src"));
//! }
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Fails with every import circle among the files of the crate under `src` (each as one loop of files,
/// `a → b → a`); passes when the file-to-file graph has none.
pub fn assert_no_import_cycles(src: impl AsRef<Path>) {
    let src = src.as_ref();
    let g = ImportGraph::of_crate(src);
    let problems: Vec<String> = g
        .cycles()
        .iter()
        .map(|group| {
            let names: Vec<String> = group.iter().map(|m| module_name(m)).collect();
            format!("import circle among {}: {}", names.join(", "), g.one_circle(group))
        })
        .collect();
    assert!(problems.is_empty(), "{}:\n{}", src.display(), problems.join("\n"));
}

/// A module's path for a message: `room::http`, or `crate` for the root file.
pub fn module_name(m: &[String]) -> String {
    if m.is_empty() { "crate".into() } else { m.join("::") }
}

/// A module of the crate by its path from the root (`["room", "http"]`; empty for the crate root).
pub type Module = Vec<String>;

/// One `.rs` file of the crate, by its module path.
struct SourceFile {
    module: Module,
    text: String,
}

/// The module of the file at `rel` (relative to `src/`), or None for a file that is a crate of its own:
/// `main.rs` beside a `lib.rs` (its `wicket_x::` paths are not imports inside the library), and anything
/// under `src/bin/`. Without a `lib.rs`, `main.rs` is the crate root.
fn module_of(rel: &Path, has_lib: bool) -> Option<Module> {
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop()?;
    let stem = last.strip_suffix(".rs")?;
    if parts.first().is_some_and(|p| p == "bin") {
        return None;
    }
    match stem {
        "lib" if parts.is_empty() => {}
        "main" if parts.is_empty() && has_lib => return None,
        "main" if parts.is_empty() => {}
        "mod" => {}
        _ => parts.push(stem.to_owned()),
    }
    Some(parts)
}

fn read_sources(dir: &Path, root: &Path, has_lib: bool, out: &mut Vec<SourceFile>) {
    let read = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()));
    let mut entries: Vec<PathBuf> = read.map(|e| e.unwrap().path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            read_sources(&p, root, has_lib, out);
        } else if p.extension().is_some_and(|e| e == "rs")
            && let Some(module) = module_of(p.strip_prefix(root).unwrap(), has_lib)
        {
            let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()));
            out.push(SourceFile { module, text });
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
        } else if (c == b'r' || (c == b'b' && b.get(i + 1) == Some(&b'r'))) && {
            let j = if c == b'b' { i + 2 } else { i + 1 };
            let mut k = j;
            while b.get(k) == Some(&b'#') {
                k += 1;
            }
            b.get(k) == Some(&b'"') && (i == 0 || !is_ident_byte(b[i - 1]))
        } {
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
fn written_paths(file: &SourceFile) -> (Vec<WrittenPath>, BTreeSet<Module>) {
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

/// A crate's import graph, file to file: who imports from whom, read from the `use` lines and the
/// `crate::` / `super::` / `self::` paths of every file (re-exports followed to the file that defines).
pub struct ImportGraph {
    /// Every file's module path.
    pub files: BTreeSet<Module>,
    /// module → modules it imports from (other files only).
    pub edges: BTreeMap<Module, BTreeSet<Module>>,
}

impl ImportGraph {
    /// The graph of the crate whose sources are under `src` (its `lib.rs`, or `main.rs` when it has no
    /// library, and every file below). Panics if `src` holds no crate root.
    pub fn of_crate(src: impl AsRef<Path>) -> ImportGraph {
        let src = src.as_ref();
        let has_lib = src.join("lib.rs").is_file();
        assert!(has_lib || src.join("main.rs").is_file(), "{} holds no lib.rs or main.rs", src.display());
        let mut sources = Vec::new();
        read_sources(src, src, has_lib, &mut sources);
        Self::of_sources(&sources)
    }

    fn of_sources(sources: &[SourceFile]) -> ImportGraph {
        let files: BTreeSet<Vec<String>> = sources.iter().map(|s| s.module.clone()).collect();
        // Each file's module, the paths it writes, and the modules it declares.
        let mut written = Vec::new();
        let mut children = BTreeSet::new();
        for s in sources {
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
        ImportGraph { files, edges }
    }

    /// The strongly connected groups of more than one file (Tarjan), each sorted.
    pub fn cycles(&self) -> Vec<Vec<Module>> {
        let g = self;
        struct Tarjan<'a> {
            g: &'a ImportGraph,
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
    pub fn one_circle(&self, group: &[Module]) -> String {
        let g = self;
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
        path.iter().map(|m| module_name(m)).collect::<Vec<_>>().join(" → ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(module: &str, text: &str) -> SourceFile {
        let module = if module.is_empty() { Vec::new() } else { module.split("::").map(str::to_owned).collect() };
        SourceFile { module, text: text.into() }
    }

    /// The reader itself: a use-tree, a `super::` path in an inline test module, a re-export, a doc link
    /// and a string are read as they should be.
    #[test]
    fn the_reader_sees_what_rust_sees() {
        let src = file(
            "room::http",
            r#"
            //! [`crate::fast`] in a doc link is not an import.
            use crate::{admission::{ProtectedRule, TokensConfig}, check::issue};
            use super::{Phase, config::RoomConfig};
            fn f() { let s = "crate::proxy::X"; let c = '"'; crate::bot::unix_now(); }
            mod tests { use super::*; fn g() { super::super::page::x(); } }
        "#,
        );
        let (paths, _) = written_paths(&src);
        let got: Vec<String> =
            paths.iter().map(|p| format!("{} in {}", p.segments.join("::"), p.scope.join("::"))).collect();
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

    /// A circle through a re-export and a bare child path is found and named as one loop; an arrow one
    /// way only, a doc link and an inline test module's `use super::*` are not circles.
    #[test]
    fn a_circle_is_found_and_one_way_arrows_are_not() {
        let sources = [
            file("", "mod config; mod store; mod tls;\npub use store::redis::WaitPolicy;"),
            file("config", "use crate::WaitPolicy;\nuse crate::tls::TlsConfig;"),
            file("store", "pub mod redis;"),
            file(
                "store::redis",
                "/// [`crate::config`]\nfn f() { let _ = crate::config::DEFAULT; }\nmod tests { use super::*; }",
            ),
            file("tls", "pub struct TlsConfig;"),
        ];
        let g = ImportGraph::of_sources(&sources);
        let config: Module = vec!["config".into()];
        let redis: Module = vec!["store".into(), "redis".into()];
        assert!(g.edges[&config].contains(&redis), "the re-export is followed: {:?}", g.edges[&config]);
        assert_eq!(g.cycles(), vec![vec![config.clone(), redis.clone()]]);
        assert_eq!(g.one_circle(&[config, redis]), "config → store::redis → config");

        let sources =
            [file("", "mod a; mod b;"), file("a", "use crate::b::X;"), file("b", "//! [`crate::a`]\npub struct X;")];
        assert!(ImportGraph::of_sources(&sources).cycles().is_empty());
    }

    /// Without a `lib.rs`, `main.rs` is the crate root (a binary-only crate such as bench/); beside one it
    /// is a crate of its own and not read.
    #[test]
    fn main_rs_is_the_root_only_without_lib_rs() {
        assert_eq!(module_of(Path::new("main.rs"), false), Some(vec![]));
        assert_eq!(module_of(Path::new("main.rs"), true), None);
        assert_eq!(module_of(Path::new("lib.rs"), true), Some(vec![]));
        assert_eq!(module_of(Path::new("store/mod.rs"), true), Some(vec!["store".to_string()]));
        assert_eq!(module_of(Path::new("bin/tool.rs"), true), None);
    }
}
