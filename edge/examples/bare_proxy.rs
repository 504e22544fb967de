//! A bare Pingora `ProxyHttp`: no phases but `upstream_peer`, HTTP/1.1 keep-alive to one origin.
//! The floor of what Pingora's proxy path costs, for `bench/edge-proxy/run.sh`.
//!
//! ```text
//! cargo run --release -p wicket-edge --example bare_proxy -- LISTEN ORIGIN THREADS
//! ```

use async_trait::async_trait;
use pingora::prelude::*;

struct Bare {
    origin: std::net::SocketAddr,
}

#[async_trait]
impl ProxyHttp for Bare {
    type CTX = ();

    fn new_ctx(&self) {}

    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut ()) -> Result<Box<HttpPeer>> {
        Ok(Box::new(HttpPeer::new(self.origin, false, String::new())))
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, listen, origin, threads] = &args[..] else {
        eprintln!("usage: bare_proxy LISTEN ORIGIN THREADS");
        std::process::exit(2);
    };
    let origin = origin.parse().expect("ORIGIN is host:port");
    let mut server = Server::new(None).expect("server");
    server.bootstrap();
    let mut proxy = http_proxy_service(&server.configuration, Bare { origin });
    proxy.add_tcp(listen);
    proxy.threads = Some(threads.parse().expect("THREADS is a number"));
    server.add_service(proxy);
    server.run_forever();
}
