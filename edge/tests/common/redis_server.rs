//! A real `redis-server` for the edge's tests: a free loopback port and its own temp dir, never
//! port 6379, never shared data; killed on drop. The binary comes from `PATH` or
//! `WICKET_REDIS_SERVER`.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One `redis-server` child process.
pub struct RedisServer {
    port: u16,
    _dir: tempfile::TempDir,
    child: Child,
}

fn inline(port: u16, cmd: &str) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200)).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    s.write_all(format!("{cmd}\r\n").as_bytes()).ok()?;
    let mut buf = [0u8; 4096];
    let n = s.read(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

impl RedisServer {
    /// Starts one without persistence and waits until *it* answers PING.
    pub fn start() -> RedisServer {
        Self::start_with(&[])
    }

    /// [`RedisServer::start`] with more `redis-server` arguments.
    pub fn start_with(extra: &[&str]) -> RedisServer {
        let bin = std::env::var("WICKET_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        for _ in 0..5 {
            let dir = tempfile::tempdir().unwrap();
            let port = loop {
                let p = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
                if p != 6379 {
                    break p;
                }
            };
            let log = std::fs::File::create(dir.path().join("redis.log")).unwrap();
            let mut child = Command::new(&bin)
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--protected-mode", "no", "--save", ""])
                .args(["--appendonly", "no", "--daemonize", "no"])
                .args(extra)
                .arg("--dir")
                .arg(dir.path())
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| panic!("cannot run {bin} ({e}); is redis-server installed?"));
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                if child.try_wait().ok().flatten().is_some() {
                    break; // lost the port to someone else: try another
                }
                let ours = inline(port, "INFO server").is_some_and(|r| r.contains(&format!("process_id:{}\r\n", child.id())));
                if ours && inline(port, "PING").is_some_and(|r| r.starts_with("+PONG")) {
                    return RedisServer { port, _dir: dir, child };
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        panic!("redis-server did not start");
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A Redis Cluster of `n` masters (no replicas) on free loopback ports.
#[allow(dead_code)]
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

#[allow(dead_code)]
impl RedisCluster {
    pub fn start(n: usize) -> RedisCluster {
        let args = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"];
        let nodes: Vec<RedisServer> = (0..n).map(|_| RedisServer::start_with(&args)).collect();
        let cli = std::env::var("WICKET_REDIS_CLI").unwrap_or_else(|_| "redis-cli".into());
        let out = Command::new(&cli)
            .args(["--cluster", "create"])
            .args(nodes.iter().map(|s| format!("127.0.0.1:{}", s.port)))
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .unwrap_or_else(|e| panic!("cannot run {cli} ({e}); is redis-tools installed?"));
        assert!(out.status.success(), "cluster create failed: {}", String::from_utf8_lossy(&out.stdout));
        let deadline = Instant::now() + Duration::from_secs(30);
        while !nodes.iter().all(|s| {
            inline(s.port, "CLUSTER INFO").is_some_and(|i| i.contains("cluster_state:ok") && i.contains(&format!("cluster_known_nodes:{n}")))
        }) {
            assert!(Instant::now() < deadline, "cluster did not become ok");
            std::thread::sleep(Duration::from_millis(100));
        }
        RedisCluster { nodes }
    }

    /// Seed URLs.
    pub fn seeds(&self) -> Vec<String> {
        self.nodes.iter().map(|s| format!("redis://127.0.0.1:{}", s.port)).collect()
    }
}
