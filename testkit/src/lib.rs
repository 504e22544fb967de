//! Wicket's test support, shared by the integration tests of every crate of the workspace (a
//! dev-dependency of each): a real `redis-server` (and a Redis Cluster, with or without replicas) on free
//! loopback ports, each with its own temp dir; never port 6379, never shared data; killed on drop. A
//! test CA for the HTTPS tests, and the import-circle check of every crate's structure test.
//!
//! # Layout
//!
//! - [`RedisServer`]: one `redis-server` child process: plain, AOF (`appendfsync always`), a replica of
//!   another; SIGKILL, SIGSTOP/SIGCONT and restart on the same port and dir (the AOF survives).
//! - [`RedisCluster`]: `n` masters (and a replica each, with a short node timeout for failover tests), made
//!   with `redis-cli --cluster create`; its seed URLs and the master of a key's slot.
//!   `start_isolatable` gives each node an address of its own, so that a [`Partition`] (nftables drop
//!   rules, root) can cut one node off from the others while clients still reach it.
//! - [`Netns`]: a network namespace for a process under test, bridged to the test's, with silent cuts
//!   of its links to the host's ports (nftables inside the namespace).
//! - [`send_inline`], [`cli`]: one command to a port, inline or through `redis-cli`.
//! - [`free_port`]: a loopback port for a process under test, never the same one twice.
//! - [`Spawned`]: a server binary under test, stderr in a file, started once its port accepts (or left to
//!   the caller's own readiness check), killed on drop.
//! - [`core_toml`]: the config file of a core under test (one HS256 key; listen, store, sections as
//!   needed), for the tests of wicket-core, its examples and the benchmarks.
//! - [`pki`]: a test CA and certificates made with the `openssl` command, and `curl` against them (the
//!   HTTPS tests of core and edge).
//! - [`structure`]: a crate's file-to-file import graph read from its source, and the check every
//!   crate's `tests/structure.rs` runs: no import circle.
//! - [`mmdb`]: a MaxMind DB (`.mmdb`) writer for the GeoIP tests: a few networks with their country and
//!   autonomous system, written as a real file.
//! - [`deploy`]: the files under deploy/ (compose, systemd units, Kubernetes manifests) as the deployment tests
//!   read them: each program's command line, its config file, its secrets.
//!
//! ```ignore
//! let redis = RedisServer::start();                 // no persistence
//! let redis = RedisServer::start_aof();             // appendonly yes, appendfsync always
//! let store = RedisStore::connect(&redis.url()).await?;
//! redis.kill9();  redis.restart();                  // same port, same dir (the AOF survives)
//! let cluster = RedisCluster::start(3);             // cluster.seeds() for RedisStore::connect_cluster
//! let replica = RedisServer::start_replica_of(&redis); // REPLICAOF, synced
//! let cluster = RedisCluster::start_with_replicas(3, 500); // 3 masters with a replica each, fast failover
//! ```
//! The binaries come from `PATH` (`redis-server`, `redis-cli`), or `WICKET_REDIS_SERVER` /
//! `WICKET_REDIS_CLI`.

pub mod core_toml;
pub mod deploy;
pub mod mmdb;
pub mod pki;
pub mod structure;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn server_bin() -> String {
    std::env::var("WICKET_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into())
}

fn cli_bin() -> String {
    std::env::var("WICKET_REDIS_CLI").unwrap_or_else(|_| "redis-cli".into())
}

/// A loopback port that was free a moment ago and that this process was never given before.
///
/// Two `bind(127.0.0.1:0)` in a row can return the same port once it is released (about 1 in
/// 20,000 pairs here, 1 in 1,500 within eight): an edge's public and admin listeners were then
/// given one port, the second bind failed in its thread, and the "public" port answered with the
/// admin API. So every port handed out is remembered.
pub fn free_port() -> u16 {
    fresh_port(false)
}

/// [`free_port`], and for Cluster nodes one whose bus port +10000 is free too.
fn fresh_port(with_bus: bool) -> u16 {
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> = std::sync::Mutex::new(std::collections::BTreeSet::new());
    loop {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = l.local_addr().unwrap().port();
        if port == 6379 || (with_bus && port > 55_000) {
            continue;
        }
        if with_bus && TcpListener::bind(("127.0.0.1", port + 10_000)).is_err() {
            continue;
        }
        if GIVEN.lock().unwrap_or_else(|e| e.into_inner()).insert(port) {
            return port;
        }
    }
}

/// Sends one inline command and returns the first reply line (`+PONG`, `-LOADING ...`).
pub fn send_inline(port: u16, cmd: &str) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200)).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    s.write_all(format!("{cmd}\r\n").as_bytes()).ok()?;
    let mut buf = [0u8; 4096];
    let n = s.read(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// One `redis-server` child process.
pub struct RedisServer {
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    args: Vec<String>,
}

impl RedisServer {
    /// A server without persistence.
    pub fn start() -> RedisServer {
        Self::start_with(&["--appendonly", "no"])
    }

    /// A server that acknowledges a write only once it is in the AOF (`appendfsync always`), as the sale's
    /// Redis runs in production (DESIGN §6).
    pub fn start_aof() -> RedisServer {
        Self::start_with(&["--appendonly", "yes", "--appendfsync", "always"])
    }

    /// A replica of `master` (no persistence), returned once its link is up and it has synced.
    pub fn start_replica_of(master: &RedisServer) -> RedisServer {
        let port = master.port.to_string();
        let replica = Self::start_with(&["--appendonly", "no", "--replicaof", "127.0.0.1", &port]);
        replica.wait_link_up();
        replica
    }

    /// Waits until this replica's link to its master is up (it has synced).
    pub fn wait_link_up(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.cli(&["info", "replication"]).contains("master_link_status:up") {
            assert!(Instant::now() < deadline, "replica on port {} did not sync", self.port);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A server with extra `redis-server` arguments.
    pub fn start_with(extra: &[&str]) -> RedisServer {
        let mut last_err = String::new();
        for _ in 0..5 {
            let dir = tempfile::tempdir().expect("temp dir");
            let port = free_port();
            let mut s = RedisServer { port, dir, child: None, args: extra.iter().map(|a| a.to_string()).collect() };
            match s.spawn() {
                Ok(()) => return s,
                Err(e) => last_err = e,
            }
        }
        panic!("redis-server did not start: {last_err}");
    }

    fn spawn(&mut self) -> Result<(), String> {
        let log = std::fs::File::create(self.dir.path().join("redis.log")).map_err(|e| e.to_string())?;
        let mut cmd = Command::new(server_bin());
        cmd.arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--protected-mode", "no", "--save", "", "--daemonize", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log);
        let child = cmd.spawn().map_err(|e| format!("cannot run {} ({e}); is redis-server installed?", server_bin()))?;
        self.child = Some(child);
        wait_ready(self.port, self.child.as_mut().unwrap(), self.dir.path())
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Whether this test started the process and has not killed it.
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// SIGKILL: no shutdown, no final fsync.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGSTOP: the server keeps its sockets but answers nothing (a hung or swapping Redis).
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    /// SIGCONT after [`freeze`](Self::freeze).
    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, sig: &str) {
        if let Some(c) = &self.child {
            let ok = Command::new("kill").arg(sig).arg(c.id().to_string()).status().is_ok_and(|s| s.success());
            assert!(ok, "kill {sig} failed");
        }
    }

    /// Starts the server again on the same port and dir (after [`kill9`](Self::kill9)).
    pub fn restart(&mut self) {
        self.kill9();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.spawn() {
                Ok(()) => return,
                Err(e) if Instant::now() > deadline => panic!("redis-server did not restart: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// Runs `redis-cli` against this server and returns its output.
    pub fn cli(&self, args: &[&str]) -> String {
        cli(self.port, args)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill9();
    }
}

pub fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new(cli_bin())
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn wait_ready(port: u16, child: &mut Child, dir: &Path) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            let log = std::fs::read_to_string(dir.join("redis.log")).unwrap_or_default();
            return Err(format!("redis-server exited ({status}): {log}"));
        }
        // Our own process must answer: another test's server may have taken the port first.
        // and be done loading its AOF (PING answers -LOADING until then).
        if send_inline(port, "INFO server").is_some_and(|r| r.contains(&format!("process_id:{}\r\n", child.id())))
            && send_inline(port, "PING").is_some_and(|r| r.starts_with("+PONG"))
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return Err("redis-server did not answer PING".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Where a cluster's nodes answer and what they announce.
enum Addressing {
    /// 127.0.0.1.
    Loopback,
    /// 127.0.1.x each (and 127.0.0.1).
    OwnIps,
    /// Every address; this one announced.
    Announce(String),
}

/// A Redis Cluster of `n` masters (and maybe a replica each) on loopback.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
    /// Each node's own address ([`RedisCluster::start_isolatable`]); empty otherwise.
    ips: Vec<String>,
}

impl RedisCluster {
    /// `n` masters, no replicas.
    pub fn start(n: usize) -> RedisCluster {
        Self::start_nodes(n, 0, 2000)
    }

    /// `n` masters with one replica each; a master unreachable for `node_timeout_ms` is failed over.
    pub fn start_with_replicas(n: usize, node_timeout_ms: u64) -> RedisCluster {
        let c = Self::start_nodes(n, 1, node_timeout_ms);
        c.wait_replicas_synced();
        c
    }

    /// [`start_with_replicas`](Self::start_with_replicas), each node on an address of its own
    /// (`127.0.1.x`, announced to the cluster and the source of its cluster bus and replication links;
    /// it answers on 127.0.0.1 too), so that [`Partition`] can cut one node off from the others while
    /// clients on 127.0.0.1 still reach it.
    pub fn start_isolatable(n: usize, node_timeout_ms: u64) -> RedisCluster {
        let c = Self::start_nodes_with(n, 1, node_timeout_ms, Addressing::OwnIps);
        c.wait_replicas_synced();
        c
    }

    /// `n` masters without replicas listening on every address and announcing `ip` (e.g. [`Netns::HOST_IP`],
    /// so that processes in network namespaces reach every node; the test's own clients do too).
    pub fn start_announcing(n: usize, ip: &str) -> RedisCluster {
        Self::start_nodes_with(n, 0, 2000, Addressing::Announce(ip.to_string()))
    }

    /// The address node `i` announces (`127.0.1.x`, or 127.0.0.1 for a cluster not made isolatable).
    pub fn node_ip(&self, i: usize) -> String {
        self.ips.get(i).cloned().unwrap_or_else(|| "127.0.0.1".into())
    }

    fn start_nodes(masters: usize, replicas: usize, node_timeout_ms: u64) -> RedisCluster {
        Self::start_nodes_with(masters, replicas, node_timeout_ms, Addressing::Loopback)
    }

    fn start_nodes_with(masters: usize, replicas: usize, node_timeout_ms: u64, addressing: Addressing) -> RedisCluster {
        let n = masters * (1 + replicas);
        let timeout = node_timeout_ms.to_string();
        // Addresses of their own: 127.0.1.1 and up, never two clusters of this process on one.
        static NEXT_IP: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
        let ips: Vec<String> = match &addressing {
            Addressing::OwnIps => {
                (0..n).map(|_| NEXT_IP.fetch_add(1, std::sync::atomic::Ordering::Relaxed)).map(|k| format!("127.0.{}.{}", 1 + k / 250, 1 + k % 250)).collect()
            }
            Addressing::Announce(ip) => vec![ip.clone(); n],
            Addressing::Loopback => Vec::new(),
        };
        let mut nodes = Vec::new();
        for i in 0..n {
            let own: Vec<String> = match (&addressing, ips.get(i)) {
                (Addressing::OwnIps, Some(ip)) => {
                    ["--bind", "127.0.0.1", ip, "--bind-source-addr", ip, "--cluster-announce-ip", ip].iter().map(|a| a.to_string()).collect()
                }
                (Addressing::Announce(ip), _) => ["--bind", "0.0.0.0", "--cluster-announce-ip", ip].iter().map(|a| a.to_string()).collect(),
                _ => Vec::new(),
            };
            let mut last_err = String::new();
            let mut started = None;
            for _ in 0..5 {
                let dir = tempfile::tempdir().expect("temp dir");
                let port = fresh_port(true);
                let mut s = RedisServer {
                    port,
                    dir,
                    child: None,
                    args: ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", &timeout, "--appendonly", "no"]
                        .iter()
                        .map(|a| a.to_string())
                        .chain(own.iter().cloned())
                        .collect(),
                };
                match s.spawn() {
                    Ok(()) => {
                        started = Some(s);
                        break;
                    }
                    Err(e) => last_err = e,
                }
            }
            nodes.push(started.unwrap_or_else(|| panic!("cluster node did not start: {last_err}")));
        }
        let addrs: Vec<String> =
            nodes.iter().enumerate().map(|(i, s)| format!("{}:{}", ips.get(i).map_or("127.0.0.1", String::as_str), s.port)).collect();
        let out = Command::new(cli_bin())
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .expect("redis-cli --cluster create");
        assert!(out.status.success(), "cluster create failed: {}", String::from_utf8_lossy(&out.stdout));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ok = nodes.iter().all(|s| {
                let info = s.cli(&["cluster", "info"]);
                info.contains("cluster_state:ok") && info.contains(&format!("cluster_known_nodes:{n}"))
            });
            if ok {
                break;
            }
            assert!(Instant::now() < deadline, "cluster did not become ok");
            std::thread::sleep(Duration::from_millis(100));
        }
        RedisCluster { nodes, ips }
    }

    /// Waits until every replica's link to its master is up.
    pub fn wait_replicas_synced(&self) {
        for node in &self.nodes {
            if node.cli(&["info", "replication"]).contains("role:slave") {
                node.wait_link_up();
            }
        }
    }

    /// The live node that is the master of `key`'s slot (it answers a read of the key without redirect).
    pub fn master_of(&self, key: &str) -> Option<usize> {
        let slot = self.nodes.iter().find(|n| n.child.is_some())?.cli(&["cluster", "keyslot", key]).trim().to_string();
        self.nodes.iter().position(|n| {
            n.child.is_some()
                && n.cli(&["cluster", "nodes"]).lines().any(|l| {
                    let f: Vec<&str> = l.split_whitespace().collect();
                    f.len() > 8
                        && f[2].contains("myself")
                        && f[2].contains("master")
                        && f[8..].iter().any(|r| slot_in(r, &slot))
                })
        })
    }

    /// Every live node that calls itself the master of `key`'s slot: two while a cut-off master has not
    /// learned that its replica was promoted on the other side.
    pub fn masters_claiming(&self, key: &str) -> Vec<usize> {
        let Some(first) = self.nodes.iter().find(|n| n.child.is_some()) else { return Vec::new() };
        let slot = first.cli(&["cluster", "keyslot", key]).trim().to_string();
        (0..self.nodes.len())
            .filter(|&i| {
                let n = &self.nodes[i];
                n.child.is_some()
                    && n.cli(&["cluster", "nodes"]).lines().any(|l| {
                        let f: Vec<&str> = l.split_whitespace().collect();
                        f.len() > 8 && f[2].contains("myself") && f[2].contains("master") && f[8..].iter().any(|r| slot_in(r, &slot))
                    })
            })
            .collect()
    }

    /// Seed URLs for `RedisStore::connect_cluster`.
    pub fn seeds(&self) -> Vec<String> {
        self.nodes.iter().map(|s| format!("redis://127.0.0.1:{}", s.port)).collect()
    }
}

/// A network partition made with nftables (root, as in CI): every packet between one address and each of
/// the others is dropped, both ways and silently (no reset: a cut link or a firewall, where a peer learns
/// of it only by its timeouts). Lifted by [`heal`](Self::heal) or on drop.
pub struct Partition {
    table: String,
}

impl Partition {
    /// Cuts `one` off from every address in `others` (loopback addresses such as 127.0.1.x work: the drop
    /// is in the output hook, which loopback traffic passes).
    pub fn between(one: &str, others: &[String]) -> Partition {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let table = format!("wicket_test_{}_{}", std::process::id(), N.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let set = others.join(", ");
        let script = format!(
            "table ip {table} {{\n  chain out {{\n    type filter hook output priority 0; policy accept;\n    \
             ip saddr {one} ip daddr {{ {set} }} drop\n    ip saddr {{ {set} }} ip daddr {one} drop\n  }}\n}}\n"
        );
        let mut nft = Command::new("nft")
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("nft (Debian's nftables; root) to make a partition");
        nft.stdin.take().expect("stdin").write_all(script.as_bytes()).expect("write the nft rules");
        let out = nft.wait_with_output().expect("nft");
        assert!(out.status.success(), "nft refused the partition: {}\n{script}", String::from_utf8_lossy(&out.stderr));
        Partition { table }
    }

    /// Lifts the partition.
    pub fn heal(self) {}
}

impl Drop for Partition {
    fn drop(&mut self) {
        let _ = Command::new("nft").args(["delete", "table", "ip", &self.table]).status();
    }
}

/// A network namespace of its own for a process under test (root, as in CI): a veth pair to a bridge in
/// the test's namespace, the bridge at [`Netns::HOST_IP`], the namespace at its own `10.201.0.x`. A
/// server the process must reach listens on `0.0.0.0` (or `HOST_IP`); the test reaches the process at
/// [`ip`](Self::ip). [`cut`](Self::cut) drops every packet from the namespace to a port of the host,
/// silently, by an nftables rule inside the namespace; [`heal`](Self::heal) lifts it. Removed on drop.
pub struct Netns {
    name: String,
    ip: String,
    veth: String,
}

impl Netns {
    /// The bridge's address: where a process in a namespace reaches the test's servers.
    pub const HOST_IP: &'static str = "10.201.0.1";
    const BRIDGE: &'static str = "wkbr0";

    /// A new namespace with a link to the bridge (made once per boot, shared by every test).
    pub fn new() -> Netns {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        // Per process and namespace: 10.201.0.2 up to .254, from the pid so two test binaries differ.
        let k = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("wk{}n{k}", std::process::id());
        let run = |args: &[&str]| {
            let out = Command::new("ip").args(args).output().expect("ip (iproute2; root) for a network namespace");
            (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
        };
        if !run(&["link", "show", Self::BRIDGE]).0 {
            let _ = run(&["link", "add", Self::BRIDGE, "type", "bridge"]);
            let _ = run(&["addr", "add", &format!("{}/24", Self::HOST_IP), "dev", Self::BRIDGE]);
        }
        let _ = run(&["link", "set", Self::BRIDGE, "up"]);
        let _ = run(&["netns", "del", &name]);
        let (ok, err) = run(&["netns", "add", &name]);
        assert!(ok, "ip netns add {name}: {err}");
        // The host number is the veth's name: the first free one from a number of this process's (another
        // test process may hold some), so an address is never given twice.
        let start = std::process::id() * 7 + k;
        let host = (0..250)
            .map(|i| 2 + (start + i) % 250)
            .find(|h| run(&["link", "add", &format!("wkv{h}"), "type", "veth", "peer", "name", "eth0", "netns", &name]).0)
            .expect("a free veth name wkv2..wkv251");
        let veth = format!("wkv{host}");
        let ip = format!("10.201.0.{host}");
        for args in [
            vec!["link", "set", &veth, "master", Self::BRIDGE],
            vec!["link", "set", &veth, "up"],
            vec!["netns", "exec", &name, "ip", "addr", "add", &format!("{ip}/24"), "dev", "eth0"],
            vec!["netns", "exec", &name, "ip", "link", "set", "eth0", "up"],
            vec!["netns", "exec", &name, "ip", "link", "set", "lo", "up"],
        ] {
            let (ok, err) = run(&args);
            assert!(ok, "ip {}: {err}", args.join(" "));
        }
        Netns { name, ip, veth }
    }

    /// The namespace's address, as the test reaches it.
    pub fn ip(&self) -> &str {
        &self.ip
    }

    /// `cmd` run inside the namespace (`ip netns exec`).
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }

    /// Drops every packet from the namespace to `port` of the host, and every answer from it, silently.
    pub fn cut(&self, port: u16) {
        self.cut_ports(&[port]);
    }

    /// [`cut`](Self::cut) for several ports at once (the nodes of a cluster).
    pub fn cut_ports(&self, ports: &[u16]) {
        let port = format!("{{ {} }}", ports.iter().map(u16::to_string).collect::<Vec<_>>().join(", "));
        let script = format!(
            "table ip wkcut {{\n  chain out {{\n    type filter hook output priority 0; policy accept;\n    \
             ip daddr {host} tcp dport {port} drop\n  }}\n  chain inp {{\n    type filter hook input priority 0; policy accept;\n    \
             ip saddr {host} tcp sport {port} drop\n  }}\n}}\n",
            host = Self::HOST_IP
        );
        let mut nft = self.command("nft").args(["-f", "-"]).stdin(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("nft (nftables; root)");
        nft.stdin.take().expect("stdin").write_all(script.as_bytes()).expect("write the nft rules");
        let out = nft.wait_with_output().expect("nft");
        assert!(out.status.success(), "nft refused the cut: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Lifts every [`cut`](Self::cut).
    pub fn heal(&self) {
        let _ = self.command("nft").args(["delete", "table", "ip", "wkcut"]).status();
    }
}

impl Default for Netns {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the namespace deletes the pair; the second is for a pair left behind.
        let _ = Command::new("ip").args(["netns", "del", &self.name]).stderr(Stdio::null()).status();
        let _ = Command::new("ip").args(["link", "del", &self.veth]).stderr(Stdio::null()).status();
    }
}

/// Whether `slot` is in a `CLUSTER NODES` slot field (`5461` or `0-5460`).
fn slot_in(range: &str, slot: &str) -> bool {
    let Ok(slot) = slot.parse::<u32>() else { return false };
    match range.split_once('-') {
        Some((a, b)) => a.parse::<u32>().is_ok_and(|a| a <= slot) && b.parse::<u32>().is_ok_and(|b| slot <= b),
        None => range.parse::<u32>().is_ok_and(|r| r == slot),
    }
}

/// A server binary run for a test: its stderr goes to a file, it is killed (and reaped) on drop.
pub struct Spawned {
    child: std::process::Child,
    /// Where its stderr goes.
    pub log: std::path::PathBuf,
}

impl Spawned {
    /// Runs `cmd` (`RUST_LOG` removed, stderr into `log`) and waits up to 20 s until `port` on loopback
    /// accepts connections; `what` names it in the failure, which shows the log.
    pub fn start(cmd: &mut std::process::Command, log: &std::path::Path, port: u16, what: &str) -> Spawned {
        let spawned = Self::spawn(cmd.env_remove("RUST_LOG"), log, what);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(std::time::Instant::now() < deadline, "{what} did not start: {}", spawned.log_text());
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        spawned
    }

    /// Runs `cmd` as it is, stderr into `log`, and returns at once: for a caller that waits on its own
    /// terms (a health answer) and watches [`exited`](Self::exited) meanwhile. `what` names it in the
    /// failure to start.
    pub fn spawn(cmd: &mut std::process::Command, log: &std::path::Path, what: &str) -> Spawned {
        let child = cmd
            .stderr(std::fs::File::create(log).expect("the log file"))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        Spawned { child, log: log.to_path_buf() }
    }

    /// How it ended, once it has.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// SIGKILL, and reap it: no shutdown of its own.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Its process id (to send it signals).
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// What it wrote to stderr so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        self.kill9();
    }
}
