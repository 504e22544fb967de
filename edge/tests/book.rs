//! The book's examples run (docs/src/, "Contributing to these docs"):
//!
//! - every ```` ```toml ```` block of docs/src/**/*.md passes `wicket check-config` as a whole file
//!   (```` ```toml,fragment ```` marks a part of a file, which is not checked);
//! - every `curl` line of the operator's guide (docs/src/operator-guide.md) answers the status its
//!   trailing `# <status>` comment says, run in order against a real `wicket demo`;
//! - README.md stays a five-minute page (≤ 150 lines, its two commands) whose links, like
//!   bench/RESULTS.md's, resolve (the book's own links: scripts/linkcheck.py on the built book).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn book() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/src")
}

fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            markdown_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "md") {
            out.push(p);
        }
    }
}

/// A fenced code block: the line its fence opens on, its info string, its text.
struct Block {
    line: usize,
    info: String,
    text: String,
}

fn blocks(md: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<(usize, String, String, String)> = None; // line, indent, info, text
    for (i, l) in md.lines().enumerate() {
        let t = l.trim_start();
        match &mut open {
            None => {
                if let Some(info) = t.strip_prefix("```") {
                    let indent = l[..l.len() - t.len()].to_owned();
                    open = Some((i + 1, indent, info.trim().to_owned(), String::new()));
                }
            }
            Some((line, indent, info, text)) => {
                if t.starts_with("```") {
                    out.push(Block { line: *line, info: std::mem::take(info), text: std::mem::take(text) });
                    open = None;
                } else {
                    text.push_str(l.strip_prefix(indent.as_str()).unwrap_or(l));
                    text.push('\n');
                }
            }
        }
    }
    out
}

#[test]
fn every_toml_snippet_of_the_book_passes_check_config() {
    let mut files = Vec::new();
    markdown_files(&book(), &mut files);
    files.sort();
    let dir = tempfile::tempdir().unwrap();
    let (mut checked, mut failed) = (0, Vec::new());
    for f in &files {
        let md = std::fs::read_to_string(f).unwrap();
        for b in blocks(&md) {
            let mut words = b.info.split(',').map(str::trim);
            if words.next() != Some("toml") || words.any(|w| w == "fragment") {
                continue;
            }
            let path = dir.path().join("wicket.toml");
            std::fs::write(&path, &b.text).unwrap();
            let out = Command::new(env!("CARGO_BIN_EXE_wicket")).arg("check-config").arg(&path).output().unwrap();
            checked += 1;
            if !out.status.success() {
                let rel = f.strip_prefix(book()).unwrap_or(f).display().to_string();
                failed.push(format!("docs/src/{rel}:{}:\n{}", b.line, String::from_utf8_lossy(&out.stderr)));
            }
        }
    }
    assert!(failed.is_empty(), "TOML snippets that `wicket check-config` refuses (mark a part of a file ```toml,fragment):\n{}", failed.join("\n"));
    assert!(checked >= 3, "only {checked} TOML snippets checked: is docs/src/ where the book is?");
}

/// The guide's `sh` blocks as one script: a `curl` line ending in `# <status>` becomes a call that
/// checks that status; every other line runs as written.
fn guide_script(md: &str) -> (String, usize) {
    let mut script = String::from(
        "set -u\n\
         check() { want=$1; line=$2; shift 2; got=$(curl -s -o /dev/null -w '%{http_code}' \"$@\"); \
         if [ \"$got\" != \"$want\" ]; then echo \"operator-guide.md:$line: answered $got, the guide says $want\"; exit 1; fi; }\n",
    );
    let mut curls = 0;
    for b in blocks(md).into_iter().filter(|b| b.info == "sh") {
        for (i, l) in b.text.lines().enumerate() {
            let line = b.line + 1 + i;
            // The guide's own `export` lines name the demo's default ports: the test's are set instead.
            if l.starts_with("export ") {
                continue;
            }
            let status = l.rsplit_once("# ").and_then(|(cmd, s)| s.trim().parse::<u16>().ok().map(|s| (cmd, s)));
            match (l.strip_prefix("curl "), status) {
                (Some(_), Some((cmd, s))) => {
                    curls += 1;
                    script.push_str(&format!("check {s} {line} {}\n", cmd.trim_end().trim_start_matches("curl ")));
                }
                (Some(_), None) => panic!("operator-guide.md:{line}: a curl line without its `# <status>`"),
                _ => {
                    script.push_str(l);
                    script.push('\n');
                }
            }
        }
    }
    (script, curls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_guide_runs_against_the_demo() {
    use std::io::BufRead;
    let md = std::fs::read_to_string(book().join("operator-guide.md")).unwrap();
    let (script, curls) = guide_script(&md);
    assert!(curls >= 10, "only {curls} curl examples found in the guide");

    let (edge, admin, core, origin) = (free_port(), free_port(), free_port(), free_port());
    let mut child = common::KillOnDrop(Command::new(env!("CARGO_BIN_EXE_wicket"))
        .arg("demo")
        .args(["--edge-port", &edge.to_string(), "--admin-port", &admin.to_string()])
        .args(["--core-port", &core.to_string(), "--origin-port", &origin.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap());
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut token = None;
    for _ in 0..40 {
        let mut l = String::new();
        if stdout.read_line(&mut l).unwrap() == 0 {
            break;
        }
        if let Some(t) = l.trim().strip_prefix("admin token: ") {
            token = Some(t.to_owned());
            break;
        }
    }
    let token = token.expect("the demo printed no admin token");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", admin)).is_err() || std::net::TcpStream::connect(("127.0.0.1", edge)).is_err() {
        assert!(Instant::now() < deadline, "demo did not start");
        assert!(child.try_wait().unwrap().is_none(), "demo exited early");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .env("EDGE", format!("http://127.0.0.1:{edge}"))
        .env("ADMIN", format!("http://127.0.0.1:{admin}"))
        .env("ADMIN_TOKEN", &token)
        .output()
        .unwrap();
    // SIGTERM: the demo removes its folder (its secrets) when it stops.
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let _ = child.wait();
    assert!(
        out.status.success(),
        "{}{}\nthe script:\n{script}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The relative links of a Markdown file outside the book (`[text](path)`), each resolved against its folder.
fn relative_links(file: &Path) -> Vec<(String, PathBuf)> {
    let text = std::fs::read_to_string(file).unwrap();
    let mut out = Vec::new();
    let mut rest = text.as_str();
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        let Some(end) = rest.find(')') else { break };
        let target = &rest[..end];
        let path = target.split('#').next().unwrap_or_default();
        if !path.is_empty() && !target.contains("://") && !target.starts_with("mailto:") {
            out.push((target.to_owned(), file.parent().unwrap().join(path)));
        }
    }
    out
}

/// README is the five-minute page (issue #43): at most 150 lines, its two commands exactly as the test
/// command and the demo run them, and every link it has (into the book, bench/) pointing at a file that exists;
/// bench/RESULTS.md's links to the benchmarks' pages likewise.
#[test]
fn readme_is_short_keeps_its_two_commands_and_its_links_resolve() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    assert!(readme.lines().count() <= 150, "README.md has {} lines; the rest belongs in the book", readme.lines().count());
    for command in ["bash scripts/demo.sh", "bash scripts/test.sh"] {
        assert!(readme.lines().any(|l| l.trim() == command), "README.md lost its command `{command}`");
    }
    let mut broken = Vec::new();
    for file in [root.join("README.md"), root.join("bench/RESULTS.md")] {
        let links = relative_links(&file);
        assert!(!links.is_empty(), "no links found in {}", file.display());
        for (target, path) in links {
            if !path.exists() {
                broken.push(format!("{}: {target}", file.strip_prefix(&root).unwrap_or(&file).display()));
            }
        }
    }
    assert!(broken.is_empty(), "links to files that do not exist:\n{}", broken.join("\n"));
}
