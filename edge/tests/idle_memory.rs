//! What an idle keep-alive connection costs the edge, in heap bytes: this test binary's allocator
//! is dhat's, which counts every byte allocated and not yet freed, on every thread (the edge runs
//! in this process). `bench/idle-conns/run.sh` measures the whole process against nginx.

mod common;

use std::time::Duration;

use common::*;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

#[global_allocator]
static ALLOCATOR: dhat::Alloc = dhat::Alloc;

/// Clients that each fetched the page and keep their connection open, idle: what each costs the
/// heap while the edge waits for their next request, both ends counted (the client's socket is a
/// few hundred bytes of it). The edge holds no read or write buffer for it: the fast front reads
/// into its worker thread's buffer only when bytes are there, and writes answers whole (4 KiB
/// each before; about 13 KB in all, 4.8 KB now: the connection's task and futures).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_connection_holds_no_buffer() {
    let edge = TestEdge::start("keepalive-seconds = 60");
    async fn clients(addr: std::net::SocketAddr, n: usize) -> Vec<TcpStream> {
        let mut conns = Vec::with_capacity(n);
        for _ in 0..n {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
            let r = read_answer(&mut s).await.expect("an answer");
            assert_eq!(r.status, 200);
            conns.push(s);
        }
        conns
    }
    // Warm: the edge's per-thread state and lazily built parts.
    drop(clients(edge.addr, 50).await);
    tokio::time::sleep(Duration::from_millis(300)).await;

    const N: usize = 500;
    let _profiler = dhat::Profiler::builder().testing().build();
    let before = dhat::HeapStats::get().curr_bytes;
    let conns = clients(edge.addr, N).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = dhat::HeapStats::get().curr_bytes;
    let each = after.saturating_sub(before) / N;
    eprintln!("heap {before} -> {after} bytes with {N} idle keep-alive clients: {each} bytes each (both ends of the connection)");
    assert!(each <= 6 * 1024, "{each} bytes per idle keep-alive connection");
    drop(conns);
}
