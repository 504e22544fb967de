//! Assembling and running the Pingora server: the public proxy service, the admin service and
//! the upkeep background service, with a bounded graceful stop.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pingora::apps::HttpServerOptions;
use pingora::listeners::{L4BufferSettings, ListenerConfig};
use pingora::server::configuration::ServerConf;
use pingora::server::{RunArgs, Server, ShutdownSignal, ShutdownSignalWatch, ShutdownWatch};
use pingora::services::background::{BackgroundService, background_service};
use pingora::services::listening::Service;
use tokio::sync::Notify;

use crate::admin::AdminService;
use crate::config::WicketConfig;
use crate::front::Front;
use crate::front::proxy::EdgeProxy;
use crate::state::EdgeState;

/// Stops on SIGTERM or SIGINT, gracefully either way (in-flight requests finish within the
/// configured grace).
pub struct SignalShutdown;

#[async_trait]
impl ShutdownSignalWatch for SignalShutdown {
    async fn recv(&self) -> ShutdownSignal {
        use tokio::signal::unix::{SignalKind, signal};
        match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }
            _ => std::future::pending::<()>().await,
        }
        tracing::info!("stop requested: finishing in-flight requests");
        ShutdownSignal::GracefulTerminate
    }
}

/// Stops when [`StopHandle::stop`] is called (tests, embedding).
pub struct NotifyShutdown(Arc<Notify>);

/// Triggers a [`NotifyShutdown`].
#[derive(Clone)]
pub struct StopHandle(Arc<Notify>);

impl StopHandle {
    /// Requests a graceful stop.
    pub fn stop(&self) {
        self.0.notify_one();
    }
}

/// A shutdown watch and its trigger.
pub fn stop_pair() -> (NotifyShutdown, StopHandle) {
    let n = Arc::new(Notify::new());
    (NotifyShutdown(n.clone()), StopHandle(n))
}

#[async_trait]
impl ShutdownSignalWatch for NotifyShutdown {
    async fn recv(&self) -> ShutdownSignal {
        self.0.notified().await;
        ShutdownSignal::GracefulTerminate
    }
}

struct Upkeep {
    state: Arc<EdgeState>,
}

#[async_trait]
impl BackgroundService for Upkeep {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let every = Duration::from_secs(self.state.config.edge.prune_seconds);
        let mut tick = tokio::time::interval(every);
        loop {
            tokio::select! {
                _ = tick.tick() => self.state.prune(),
                _ = shutdown.changed() => return,
            }
        }
    }
}

/// Looks the core's and the origin's names up again when due (`edge.resolve-every-ms`, or soon after a
/// connection failed): [`crate::resolve`].
struct FollowNames {
    state: Arc<EdgeState>,
}

#[async_trait]
impl BackgroundService for FollowNames {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let names: Vec<(&'static str, Arc<crate::resolve::Name>)> = [("edge.core", &self.state.core), ("edge.origin", &self.state.origin)]
            .into_iter()
            .filter_map(|(which, up)| Some((which, up.as_ref()?.target.clone())))
            .collect();
        let every = Duration::from_millis(self.state.config.edge.resolve_every_ms);
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => crate::resolve::refresh_due(&names, crate::room::unix_ms(), every).await,
                _ = shutdown.changed() => return,
            }
        }
    }
}

/// Reloads the TLS certificates and the GeoIP databases on SIGHUP (a bad file keeps the old ones; the log says why). Runs without
/// `[edge.tls]` too, so that a SIGHUP (`systemctl reload`, a certificate renewal hook) never stops an edge: the
/// signal's default action is to end the process.
struct ReloadOnHangup {
    state: Arc<EdgeState>,
}

#[async_trait]
impl BackgroundService for ReloadOnHangup {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) else { return };
        loop {
            tokio::select! {
                _ = hup.recv() => {
                    match &self.state.tls {
                        Some(tls) => {
                            if let Err(problems) = tls.reload() {
                                tracing::warn!("SIGHUP: TLS certificates not reloaded, the old ones stay: {}", problems.join("; "));
                            }
                        }
                        None => tracing::info!("SIGHUP: no [edge.tls], no certificates to reload"),
                    }
                    if let Some(geoip) = &self.state.geoip {
                        match geoip.reload() {
                            Ok(summary) => tracing::info!("SIGHUP: GeoIP databases reloaded: {summary}"),
                            Err(problem) => tracing::warn!("SIGHUP: GeoIP databases not reloaded, the old ones stay: {problem}"),
                        }
                    }
                }
                _ = shutdown.changed() => return,
            }
        }
    }
}

/// Builds the Pingora server for a validated state. Listening happens in `run`.
pub fn build(state: Arc<EdgeState>) -> Server {
    let e = &state.config.edge;
    let grace = e.shutdown_grace_seconds;
    let conf = ServerConf {
        threads: e.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
        // Pingora sleeps the whole grace period, then gives runtimes the shutdown timeout:
        // split the configured grace between the two so the total stays within it.
        grace_period_seconds: Some(grace.saturating_sub(1)),
        graceful_shutdown_timeout_seconds: Some(1),
        // Pingora counts the first attempt as a try.
        max_retries: state.retries + 1,
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    let conf = server.configuration.clone();

    let mut options = HttpServerOptions::default();
    options.keepalive_request_limit = Some(100_000);
    let https_redirect = e.tls.as_ref().filter(|t| t.redirect_http).and_then(|t| crate::check::parse_listen(&t.listen)).map(|a| a.port());
    let mut proxy = pingora::proxy::http_proxy(&conf, EdgeProxy { state: state.clone(), hsts: None });
    proxy.server_options = Some(options.clone());
    // The static fast path answers plain GET/HEAD of files; everything else reaches the proxy.
    let front = Front { state: state.clone(), proxy: Arc::new(proxy), tls: None, https_redirect, hsts: None };
    let mut public = Service::new("wicket edge".to_owned(), front);
    // Per-connection memory must not grow with the site, nor stay with an idle connection:
    // Pingora's defaults allocate a 64 KiB read buffer and a 1460-byte write buffer for every
    // connection, idle or not. Reads go to the fast front's thread buffer (it reads every head
    // first, front::first_read); the fast path writes its answers whole itself
    // (front::http1's write_answer), and a connection handed to the proxy gathers its writes only while
    // it has some (replay::buffered). So plain HTTP has no buffer of Pingora's at all.
    public.add_listener(ListenerConfig::tcp(e.listen.clone()).l4_buffer(L4BufferSettings::unbuffered()));
    if let (Some(tls), Some(cfg)) = (state.tls.clone(), e.tls.as_ref()) {
        // HTTPS: the front does the handshake (crate::tls), then the proxy serves HTTP/2 or 1.1.
        let hsts = tls.hsts().and_then(|v| http::HeaderValue::from_str(&v).ok());
        let mut proxy = pingora::proxy::http_proxy(&conf, EdgeProxy { state: state.clone(), hsts: hsts.clone() });
        proxy.server_options = Some(options);
        let front = Front { state: state.clone(), proxy: Arc::new(proxy), tls: Some(tls), https_redirect: None, hsts: hsts.map(crate::front::Hsts::new) };
        let mut secure = Service::new("wicket edge tls".to_owned(), front);
        // No buffer of Pingora's under TLS either: the records are gathered only while there are
        // some (replay::under_tls), so an idle HTTPS connection holds its TLS state and no buffer.
        secure.add_listener(ListenerConfig::tcp(cfg.listen.clone()).l4_buffer(L4BufferSettings::unbuffered()));
        server.add_service(secure);
    }
    server.add_service(background_service("wicket tls reload", ReloadOnHangup { state: state.clone() }));
    let mut admin = Service::new("wicket admin".to_owned(), AdminService { state: state.clone(), sessions: Default::default() });
    admin.threads = Some(1);
    admin.add_tcp(&e.admin_listen);
    server.add_service(public);
    server.add_service(admin);
    server.add_service(background_service("wicket rooms", crate::room::release::ReleaseLoop {
            rooms: state.rooms.clone(),
            core: state.core.as_ref().map(|u| u.target.clone()),
            registry: state.metrics.registry.clone(),
        }));
    server.add_service(background_service("wicket resolve", FollowNames { state: state.clone() }));
    server.add_service(background_service("wicket upkeep", Upkeep { state }));
    server
}

/// Checks that both ports can be bound, so a busy port is a clear error rather than a panic
/// inside Pingora.
pub fn check_ports(cfg: &WicketConfig) -> anyhow::Result<()> {
    let tls = cfg.edge.tls.as_ref().map(|t| ("edge.tls.listen", &t.listen));
    for (name, addr) in [("edge.listen", &cfg.edge.listen), ("edge.admin-listen", &cfg.edge.admin_listen)].into_iter().chain(tls) {
        std::net::TcpListener::bind(addr).map_err(|e| anyhow::anyhow!("{name}: cannot listen on {addr}: {e}"))?;
    }
    Ok(())
}

/// Runs the edge until `shutdown` fires; returns after in-flight requests finished (or the grace
/// ran out).
pub fn run(cfg: WicketConfig, shutdown: Box<dyn ShutdownSignalWatch>) -> anyhow::Result<()> {
    let embedded = if cfg.edge.core == "embedded" {
        let Some(source) = &cfg.source else {
            anyhow::bail!("edge.core = \"embedded\" needs the config to be read from a file");
        };
        let core_cfg = wicket_core::config::CoreConfig::from_file(source).map_err(|e| anyhow::anyhow!("{e}"))?;
        Some(EmbeddedCore::start(core_cfg)?)
    } else {
        None
    };
    let state = Arc::new(EdgeState::build_with_core(cfg, embedded.as_ref().map(|c| c.addr))?);
    check_ports(&state.config)?;
    let e = &state.config.edge;
    tracing::info!("listening on {} (public HTTP)", e.listen);
    if let Some(tls) = &e.tls {
        tracing::info!("listening on {} (public HTTPS)", tls.listen);
    }
    tracing::info!("listening on {} (admin: console, admin API, /metrics)", e.admin_listen);
    let server = build(state);
    server.run(RunArgs { shutdown_signal: shutdown });
    if let Some(core) = embedded {
        core.stop();
    }
    Ok(())
}

/// The sale core running in this process on its own runtime (`edge.core = "embedded"`).
pub struct EmbeddedCore {
    /// Where it listens (its configured `listen`).
    pub addr: std::net::SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    thread: std::thread::JoinHandle<anyhow::Result<()>>,
}

impl EmbeddedCore {
    /// Binds the core's `listen` address and serves it on a thread.
    pub fn start(cfg: wicket_core::config::CoreConfig) -> anyhow::Result<Self> {
        // This edge reaches its embedded core in plain HTTP over loopback; `[tls]` is for a core on a host of
        // its own (`wicket core`, `wicket-core serve`), which the edge names as `core = "https://..."`.
        if cfg.tls.is_some() {
            anyhow::bail!("tls: an embedded core (edge.core = \"embedded\") is reached over loopback in plain HTTP; remove [tls], or run the core on its own and set edge.core = \"https://host:port\"");
        }
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
        let listen = cfg.listen;
        let listener = rt
            .block_on(tokio::net::TcpListener::bind(listen))
            .map_err(|e| anyhow::anyhow!("listen: cannot listen on {listen} (embedded core): {e}"))?;
        let addr = listener.local_addr()?;
        let (stop, rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            rt.block_on(wicket_core::run(cfg, listener, async move {
                let _ = rx.await;
            }))
        });
        Ok(EmbeddedCore { addr, stop, thread })
    }

    /// Stops it after its in-flight requests.
    pub fn stop(self) {
        let _ = self.stop.send(());
        if let Ok(Err(e)) = self.thread.join() {
            tracing::warn!("embedded core: {e:#}");
        }
    }
}

/// `wicket core`: the sale core alone, until SIGTERM/SIGINT.
pub fn run_core(cfg: wicket_core::config::CoreConfig) -> anyhow::Result<()> {
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        let listen = cfg.listen;
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|e| anyhow::anyhow!("listen: cannot listen on {listen} (the `listen` key of the config): {e}"))?;
        let stop = async {
            use tokio::signal::unix::{SignalKind, signal};
            if let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }
        };
        wicket_core::run(cfg, listener, stop).await
    })
}

#[cfg(test)]
mod idle_state {
    /// An idle keep-alive connection waiting in the front (the proxy behind it, as [`super::build`]
    /// puts them together) holds a small future and no buffer (`front::first_read`), and after a
    /// second nothing of Pingora's (`front::conn::Parked`): its task is that future
    /// (`tests/idle_memory.rs` counts the heap of idle connections, `bench/idle-conns/run.sh`
    /// measures the whole process against nginx).
    ///
    /// Both futures are boxed at every request, so they are kept small: the header slots live on
    /// the heap, not in them (they were 4.4 KB and 8.4 KB, copied at each request).
    #[tokio::test]
    async fn an_idle_connection_and_a_request_have_small_futures() {
        let text = "[edge]\nsecret = \"fast-path-test-secret-0123456789\"\n";
        let st = std::sync::Arc::new(crate::state::EdgeState::build(crate::config::WicketConfig::from_toml_str(text).unwrap()).unwrap());
        let conf = std::sync::Arc::new(pingora::server::configuration::ServerConf::default());
        let proxy = std::sync::Arc::new(pingora::proxy::http_proxy(&conf, crate::front::proxy::EdgeProxy { state: st.clone(), hsts: None }));
        let front = std::sync::Arc::new(crate::front::Front { state: st, proxy, tls: None, https_redirect: None, hsts: None });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let stream: pingora::protocols::Stream = Box::new(pingora::protocols::l4::stream::Stream::from(client));
        let (_stop, watch) = tokio::sync::watch::channel(false);
        // A plain connection's own task (`Front::serve_on`): its future is what an idle one holds
        // (424 bytes in a release build: a task of 640 with the runtime's header).
        let waiting = std::sync::Arc::clone(&front).serve_on(stream, watch.clone());
        let size = std::mem::size_of_val(&waiting);
        eprintln!("an idle connection's future: {size} bytes");
        assert!(size <= 512, "{size} bytes per idle connection's future");
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let stream: pingora::protocols::Stream = Box::new(pingora::protocols::l4::stream::Stream::from(client));
        let serving = front.serve(stream, b"GET / HTTP/1.1\r\n\r\n", &watch);
        let size = std::mem::size_of_val(&serving);
        eprintln!("a request's future: {size} bytes");
        assert!(size <= 3 * 1024, "{size} bytes in a request's future");
    }
}
