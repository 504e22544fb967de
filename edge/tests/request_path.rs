//! An admitted fan's GET, followed from the listener to the origin, passes each file of the edge at
//! most once (issue #25): the doors sit side by side, so a request is not carried through a tower
//! of transports that each hand it to the next and get it back.
//!
//! Measured on the real `wicket` binary under gdb: breakpoints at the decision's deepest check
//! (the token's holder and session, `Rooms::session_ok`) and where the request leaves for the
//! origin (the HTTP/1.1 door's forwarded path writing the head; Pingora's proxy building the
//! upstream request) print the call stack; the edge's own files on it, outermost first, must each
//! appear in one run. Two doors: a keep-alive GET (the HTTP/1.1 door, forwarded) and the same GET
//! with `Connection: close` (handed over to Pingora's proxy).
//!
//! What this reads is nesting (the stack at those points), not the history of calls that
//! returned before them: the door asking `decide` and getting an answer back is one call, not a
//! second pass.
//!
//! Needs gdb (the test command installs it).

mod common;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{HS_SECRET, TestUpstream, free_port, hs_tokens, mint_token};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src");

/// `file:line` of the first line of `file` (under edge/src) holding `text` after the first one
/// holding `after`.
fn mark(file: &str, after: &str, text: &str) -> String {
    let src = std::fs::read_to_string(format!("{SRC}/{file}")).unwrap();
    let start = src.lines().position(|l| l.contains(after)).unwrap_or_else(|| panic!("{file}: no {after:?}: update the mark"));
    let line = src.lines().skip(start).position(|l| l.contains(text)).unwrap_or_else(|| panic!("{file}: no {text:?}: update the mark"));
    format!("edge/src/{file}:{}", start + line + 1)
}

/// Prints, at each mark, the files of the call stack (innermost first), and never stops there.
const GDB_SCRIPT: &str = r#"
import gdb, os
gdb.execute("set pagination off")
gdb.execute("set confirm off")
gdb.execute("handle SIGPIPE nostop noprint pass")
class Mark(gdb.Breakpoint):
    def __init__(self, tag, spec):
        super().__init__(spec)
        self.tag = tag
    def stop(self):
        files = []
        f = gdb.newest_frame()
        while f is not None:
            try:
                sal = f.find_sal()
                if sal.symtab is not None:
                    files.append(sal.symtab.fullname())
            except Exception:
                pass
            f = f.older()
        gdb.write("WICKET-STACK %s %s\n" % (self.tag, " ".join(files)))
        gdb.flush()
        return False
for spec in os.environ["WICKET_MARKS"].split(";"):
    tag, loc = spec.split("=", 1)
    Mark(tag, loc)
gdb.execute("run")
"#;

/// One GET on a fresh connection; its answer's status (the head and a `Content-Length` body).
async fn get(port: u16, extra: &str) -> u16 {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let req = format!("GET /members/page HTTP/1.1\r\nHost: shop.example\r\nAccept: application/json\r\n{extra}\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout_at(deadline.into(), s.read(&mut chunk)).await.expect("no answer in 120 s").unwrap();
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).to_string();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len = head.lines().find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse::<usize>().unwrap()));
            if n == 0 || len.is_some_and(|len| body.len() >= len) {
                return head.split(' ').nth(1).unwrap().parse().unwrap();
            }
        }
        assert!(n > 0, "closed before an answer: {text}");
    }
}

/// The edge's own files on a stack (outermost first), consecutive frames of one file as one.
fn edge_files(stack: &str) -> Vec<String> {
    let mut files: Vec<String> = stack
        .split(' ')
        .filter_map(|f| f.split_once("/edge/src/").map(|(_, rel)| rel.to_string()))
        .collect();
    files.reverse();
    files.dedup();
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admitted_get_passes_each_file_once_through_either_door() {
    if Command::new("gdb").arg("--version").stdout(Stdio::null()).status().is_err() {
        panic!("gdb is not installed: the test command (scripts/test.sh) installs it");
    }
    let origin = TestUpstream::start("origin").await;
    let dir = tempfile::tempdir().unwrap();
    let (port, admin_port) = (free_port(), free_port());
    let cfg = dir.path().join("wicket.toml");
    std::fs::write(
        &cfg,
        format!(
            "[edge]\nlisten = \"127.0.0.1:{port}\"\nadmin-listen = \"127.0.0.1:{admin_port}\"\nadmin-token = \"{}\"\n\
             secret = \"{}\"\nthreads = 1\nshutdown-grace-seconds = 1\norigin = \"http://{}\"\nuser-header = \"x-user-id\"\n\
             [[edge.protected]]\npath = \"/members/\"\nroom = \"vip\"\n{}",
            common::ADMIN_TOKEN,
            common::SECRET,
            origin.addr,
            hs_tokens()
        ),
    )
    .unwrap();
    let marks = [
        ("session", mark("room/mod.rs", "pub async fn session_ok(", "self.get(room)")),
        ("forward", mark("front/forward.rs", "async fn exchange(", "let write_timeout")),
        ("proxy", mark("front/proxy.rs", "async fn upstream_request_filter(", "for h in IDENTITY_HEADERS")),
    ];
    let script = dir.path().join("stacks.py");
    std::fs::write(&script, GDB_SCRIPT).unwrap();
    let mut gdb = Command::new("gdb")
        .args(["-nx", "-batch", "-x"])
        .arg(&script)
        .arg("--args")
        .arg(env!("CARGO_BIN_EXE_wicket"))
        .arg("serve")
        .arg("--config")
        .arg(&cfg)
        .env("WICKET_MARKS", marks.iter().map(|(t, l)| format!("{t}={l}")).collect::<Vec<_>>().join(";"))
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() || std::net::TcpStream::connect(("127.0.0.1", admin_port)).is_err() {
        assert!(Instant::now() < deadline, "the edge did not start under gdb");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let token = mint_token("vip", "vip", "alice", 300, "wicket", "hs-1", HS_SECRET);
    let admitted = format!("Cookie: wicket_a_vip={token}\r\nX-User-Id: alice\r\n");
    // Keep-alive: the HTTP/1.1 door decides and forwards itself.
    assert_eq!(get(port, &admitted).await, 200);
    // Connection: close: handed over to Pingora's proxy, which decides as the proxy door.
    assert_eq!(get(port, &format!("{admitted}Connection: close\r\n")).await, 200);
    assert_eq!(origin.hits.load(std::sync::atomic::Ordering::SeqCst), 2);

    // Stop the edge (SIGTERM to gdb's inferior: its only child), then read what gdb printed.
    let children = std::fs::read_to_string(format!("/proc/{}/task/{}/children", gdb.id(), gdb.id())).unwrap_or_default();
    for pid in children.split_whitespace() {
        let _ = Command::new("kill").args(["-TERM", pid]).status();
    }
    let mut out = String::new();
    let mut stdout = gdb.stdout.take().unwrap();
    let read = std::thread::spawn(move || {
        use std::io::Read;
        let _ = stdout.read_to_string(&mut out);
        out
    });
    let stop = Instant::now() + Duration::from_secs(30);
    while gdb.try_wait().unwrap().is_none() {
        if Instant::now() > stop {
            let _ = gdb.kill();
            for pid in children.split_whitespace() {
                let _ = Command::new("kill").args(["-KILL", pid]).status();
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = read.join().unwrap();

    let mut stacks: BTreeMap<&str, Vec<Vec<String>>> = BTreeMap::new();
    for line in out.lines() {
        if let Some(rest) = line.strip_prefix("WICKET-STACK ") {
            let (tag, stack) = rest.split_once(' ').unwrap_or((rest, ""));
            stacks.entry(tag).or_default().push(edge_files(stack));
        }
    }
    // Each mark was reached as expected: the holder check twice (once per door), the forwarded
    // path once, the proxy once.
    let seen: BTreeMap<&str, usize> = stacks.iter().map(|(t, s)| (*t, s.len())).collect();
    assert_eq!(seen, BTreeMap::from([("forward", 1), ("proxy", 1), ("session", 2)]), "gdb printed:\n{out}");
    for (tag, list) in &stacks {
        for files in list {
            let mut once = std::collections::BTreeSet::new();
            let again: Vec<&String> = files.iter().filter(|f| !once.insert(*f)).collect();
            assert!(again.is_empty(), "{tag}: the request passes {again:?} twice on its way: {files:?}");
        }
    }
    // The stacks are the ones this test means (so a broken reading cannot pass it): the listener,
    // then the door, then the decision or the way out.
    let fwd = &stacks["forward"][0];
    assert_eq!(fwd, &["front/mod.rs", "front/http1.rs", "front/forward.rs"], "{fwd:?}");
    let proxy = &stacks["proxy"][0];
    assert_eq!(proxy.first().map(String::as_str), Some("front/mod.rs"), "{proxy:?}");
    assert_eq!(proxy.last().map(String::as_str), Some("front/proxy.rs"), "{proxy:?}");
    let fast_check = &stacks["session"][0];
    assert_eq!(fast_check, &["front/mod.rs", "front/http1.rs", "decide.rs", "room/mod.rs"], "{fast_check:?}");
    let proxy_check = &stacks["session"][1];
    assert_eq!(proxy_check.last().map(String::as_str), Some("room/mod.rs"), "{proxy_check:?}");
    assert!(proxy_check.iter().any(|f| f == "front/proxy.rs"), "{proxy_check:?}");
    eprintln!("stacks (outermost first): {stacks:#?}");
}
