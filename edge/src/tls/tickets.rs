//! Session tickets that every edge can open: `ticket-key-files` in `[edge.tls]`.
//!
//! Without them each edge seals its TLS session tickets with keys of its own process (rustls's
//! ticketer, rotated every 6 hours), so a fan whose next connection lands on another edge behind
//! the balancer, or on any edge after a restart, makes a full handshake again. With them, every
//! edge derives the same ticket keys from the same secret files, and a ticket sealed by one edge
//! resumes on all of them (nginx's `ssl_session_ticket_key` serves the same end).
//!
//! A file holds at least 32 random bytes (`openssl rand 80`, the size nginx's key files have, is
//! fine). The keys are not the files' bytes: from each file's secret (HKDF-SHA256) the edge
//! derives one key per 6-hour period of the Unix clock, so the keys rotate by themselves, on every
//! edge at the same moments, with nothing to coordinate. A ticket is sealed with the first file's
//! key of the current period (ChaCha20-Poly1305, a random nonce, the key's 16-byte name in front
//! and bound as associated data) and opened with any file's key of the previous, current or next
//! period: a ticket lives 6 to 12 hours, and clocks a few minutes apart at a period's turn do not
//! matter. Replacing a file: put the new one first and keep the old one second until a period has
//! passed, then drop it (`SIGHUP` or `POST /admin/tls/reload` reads the files again).
//!
//! What the secret protects: whoever reads it can open the tickets of any period, and with them
//! the keys of resumed sessions, so it is kept like a certificate's private key (mode 0600) and
//! replaced now and then; a per-process key (no files) never leaves the process.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::hkdf::{HKDF_SHA256, KeyType, Prk, Salt};
use ring::rand::{SecureRandom, SystemRandom};

/// A period of the Unix clock with keys of its own, in seconds.
pub const PERIOD_S: u64 = 6 * 3600;
/// A secret file's size: at least this many bytes...
pub const MIN_SECRET: usize = 32;
/// ...and at most this many (a secret, not a document).
pub const MAX_SECRET: usize = 1024;
/// At most this many files: the first seals, the others only open.
pub const MAX_FILES: usize = 4;
/// The name in front of each ticket.
const NAME_LEN: usize = 16;
/// The AEAD's tag.
const TAG_LEN: usize = 16;
/// A ticket longer than this is not one of ours (rustls's own session values are a few hundred bytes).
const MAX_TICKET: usize = 4096;

/// The secret of one file: where each period's key comes from.
fn read_secret(path: &Path) -> Result<Prk, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if !(MIN_SECRET..=MAX_SECRET).contains(&bytes.len()) {
        return Err(format!(
            "{} holds {} bytes; a ticket key file holds {MIN_SECRET} to {MAX_SECRET} random bytes (e.g. `openssl rand 80 > {}`)",
            path.display(),
            bytes.len(),
            path.display()
        ));
    }
    if bytes.iter().all(|&b| b == bytes[0]) {
        return Err(format!("{} holds one byte repeated, not a secret (e.g. `openssl rand 80 > {}`)", path.display(), path.display()));
    }
    Ok(Salt::new(HKDF_SHA256, b"wicket tls session tickets v1").extract(&bytes))
}

/// Checks the files as [`read`] would read them: each problem with its index.
pub fn check(files: &[PathBuf]) -> Vec<(usize, String)> {
    read(files).err().unwrap_or_default()
}

/// The secrets of the ticket key files, in their order.
pub struct Secrets(Arc<[Prk]>);

/// Reads every file: all must be good (the problems otherwise, each with its file's index).
pub fn read(files: &[PathBuf]) -> Result<Secrets, Vec<(usize, String)>> {
    let mut secrets = Vec::with_capacity(files.len());
    let mut problems = Vec::new();
    for (i, f) in files.iter().enumerate() {
        match read_secret(f) {
            Ok(s) => secrets.push(s),
            Err(m) => problems.push((i, m)),
        }
    }
    if problems.is_empty() { Ok(Secrets(secrets.into())) } else { Err(problems) }
}

/// A byte length for HKDF's output.
struct Len(usize);

impl KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

/// One secret's key for one period, and its name.
struct PeriodKey {
    name: [u8; NAME_LEN],
    key: LessSafeKey,
}

impl PeriodKey {
    fn derive(secret: &Prk, period: u64) -> PeriodKey {
        let mut okm = [0u8; NAME_LEN + 32];
        secret
            .expand(&[b"ticket key", &period.to_be_bytes()], Len(okm.len()))
            .and_then(|o| o.fill(&mut okm))
            .expect("48 bytes are within HKDF-SHA256's output");
        let mut name = [0u8; NAME_LEN];
        name.copy_from_slice(&okm[..NAME_LEN]);
        let key = UnboundKey::new(&CHACHA20_POLY1305, &okm[NAME_LEN..]).expect("a 32-byte ChaCha20-Poly1305 key");
        PeriodKey { name, key: LessSafeKey::new(key) }
    }
}

/// The keys of one period: the one that seals, and every one that opens.
struct Keys {
    secrets: Arc<[Prk]>,
    period: u64,
    /// Per secret (in the files' order), its keys of periods `period - 1`, `period`, `period + 1`.
    open: Vec<PeriodKey>,
}

impl Keys {
    fn new(secrets: Arc<[Prk]>, period: u64) -> Keys {
        let open = secrets.iter().flat_map(|s| [period.saturating_sub(1), period, period + 1].map(|p| PeriodKey::derive(s, p))).collect();
        Keys { secrets, period, open }
    }

    /// The first secret's key of the current period.
    fn seal_key(&self) -> &PeriodKey {
        &self.open[1]
    }

    fn seal(&self, plain: &[u8], random: &dyn SecureRandom) -> Option<Vec<u8>> {
        let k = self.seal_key();
        let mut nonce = [0u8; NONCE_LEN];
        random.fill(&mut nonce).ok()?;
        let mut out = Vec::with_capacity(NAME_LEN + NONCE_LEN + plain.len() + TAG_LEN);
        out.extend_from_slice(&k.name);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(plain);
        let tag = k.key.seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::from(k.name), &mut out[NAME_LEN + NONCE_LEN..]).ok()?;
        out.extend_from_slice(tag.as_ref());
        Some(out)
    }

    fn open(&self, ticket: &[u8]) -> Option<Vec<u8>> {
        if ticket.len() < NAME_LEN + NONCE_LEN + TAG_LEN || ticket.len() > MAX_TICKET {
            return None;
        }
        let (name, rest) = ticket.split_at(NAME_LEN);
        let (nonce, sealed) = rest.split_at(NONCE_LEN);
        // Names are not secret (they travel in every ticket); the AEAD below is what authenticates.
        let k = self.open.iter().find(|k| k.name[..] == *name)?;
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut buf = sealed.to_vec();
        let plain = k.key.open_in_place(nonce, Aad::from(k.name), &mut buf).ok()?.len();
        buf.truncate(plain);
        Some(buf)
    }
}

/// rustls's ticketer when `ticket-key-files` are set; [`SharedTickets::replace`] swaps the secrets.
pub struct SharedTickets {
    keys: ArcSwap<Keys>,
    random: SystemRandom,
}

impl std::fmt::Debug for SharedTickets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let k = self.keys.load();
        f.debug_struct("SharedTickets").field("files", &k.secrets.len()).field("period", &k.period).finish_non_exhaustive()
    }
}

/// The period of the Unix clock now.
fn period_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()) / PERIOD_S
}

impl SharedTickets {
    /// Seals and opens with `secrets`.
    pub fn new(secrets: Secrets) -> SharedTickets {
        SharedTickets { keys: ArcSwap::from_pointee(Keys::new(secrets.0, period_now())), random: SystemRandom::new() }
    }

    /// New tickets are sealed, and tickets opened, with `secrets` from now on (a reload).
    pub fn replace(&self, secrets: Secrets) {
        self.keys.store(Arc::new(Keys::new(secrets.0, period_now())));
    }

    /// The keys of the current period (derived again when a period has turned).
    fn current(&self) -> arc_swap::Guard<Arc<Keys>> {
        let keys = self.keys.load();
        let now = period_now();
        if keys.period == now {
            return keys;
        }
        // Two threads at the turn may both derive; either result is the same.
        self.keys.store(Arc::new(Keys::new(Arc::clone(&keys.secrets), now)));
        self.keys.load()
    }

    /// How many files' secrets are in use.
    pub fn files(&self) -> usize {
        self.keys.load().secrets.len()
    }
}

impl rustls::server::ProducesTickets for SharedTickets {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        PERIOD_S as u32
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        self.current().seal(plain, &self.random)
    }

    fn decrypt(&self, ticket: &[u8]) -> Option<Vec<u8>> {
        self.current().open(ticket)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret_file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }

    fn secrets(dir: &Path, seeds: &[u8]) -> Arc<[Prk]> {
        let files: Vec<PathBuf> = seeds.iter().map(|&s| secret_file(dir, &format!("k{s}"), &(0..80u8).map(|i| i.wrapping_mul(31) ^ s).collect::<Vec<_>>())).collect();
        read(&files).unwrap().0
    }

    #[test]
    fn a_ticket_opens_in_its_period_and_the_next_two_and_under_any_file_listed() {
        let dir = tempfile::tempdir().unwrap();
        let rng = SystemRandom::new();
        let plain = b"session value".to_vec();
        let both = secrets(dir.path(), &[1, 2]);
        let ticket = Keys::new(Arc::clone(&both), 1000).seal(&plain, &rng).unwrap();
        assert_eq!(ticket.len(), NAME_LEN + NONCE_LEN + plain.len() + TAG_LEN);
        // An edge at period 999 (its clock behind), 1000 or 1001 opens it; 998 and 1002 do not.
        for (period, opens) in [(998, false), (999, true), (1000, true), (1001, true), (1002, false)] {
            assert_eq!(Keys::new(Arc::clone(&both), period).open(&ticket), opens.then(|| plain.clone()), "period {period}");
        }
        // Rotation: an edge whose second file is the old first one opens it; one without it does not.
        let rotated = secrets(dir.path(), &[3, 1]);
        assert_eq!(Keys::new(rotated, 1000).open(&ticket), Some(plain.clone()));
        let other = secrets(dir.path(), &[3]);
        assert_eq!(Keys::new(other, 1000).open(&ticket), None);
        // Sealing uses the first file only: a ticket of [2, 1] does not open under [1].
        let t2 = Keys::new(secrets(dir.path(), &[2, 1]), 1000).seal(&plain, &rng).unwrap();
        assert_eq!(Keys::new(secrets(dir.path(), &[1]), 1000).open(&t2), None);
        // Two seals of the same value differ (random nonces).
        assert_ne!(Keys::new(Arc::clone(&both), 1000).seal(&plain, &rng), Some(ticket));
    }

    #[test]
    fn forged_truncated_and_oversized_tickets_do_not_open() {
        let dir = tempfile::tempdir().unwrap();
        let keys = Keys::new(secrets(dir.path(), &[7]), 5);
        let ticket = keys.seal(b"0123456789abcdef", &SystemRandom::new()).unwrap();
        assert!(keys.open(&ticket).is_some());
        for i in 0..ticket.len() {
            let mut t = ticket.clone();
            t[i] ^= 0x01;
            assert_eq!(keys.open(&t), None, "byte {i} flipped");
        }
        for n in 0..ticket.len() {
            assert_eq!(keys.open(&ticket[..n]), None, "cut to {n}");
        }
        let mut long = ticket.clone();
        long.push(0);
        assert_eq!(keys.open(&long), None);
        assert_eq!(keys.open(&vec![0u8; MAX_TICKET + 1]), None);
        assert_eq!(keys.open(&[]), None);
    }

    #[test]
    fn files_too_short_too_long_missing_or_not_random_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let good = secret_file(dir.path(), "good", &[0x5a; 79].iter().chain([1u8].iter()).copied().collect::<Vec<_>>());
        let short = secret_file(dir.path(), "short", b"changeme");
        let long = secret_file(dir.path(), "long", &vec![7u8; MAX_SECRET + 1]);
        let same = secret_file(dir.path(), "same", &[0u8; 48]);
        let missing = dir.path().join("missing");
        let problems = check(&[good.clone(), short, long, same, missing]);
        assert_eq!(problems.iter().map(|p| p.0).collect::<Vec<_>>(), vec![1, 2, 3, 4], "{problems:?}");
        assert!(problems[0].1.contains("holds 8 bytes") && problems[0].1.contains("openssl rand 80"), "{}", problems[0].1);
        assert!(problems[1].1.contains("holds 1025 bytes"), "{}", problems[1].1);
        assert!(problems[2].1.contains("one byte repeated"), "{}", problems[2].1);
        assert!(problems[3].1.contains("cannot read"), "{}", problems[3].1);
        assert_eq!(read(&[good.clone(), dir.path().join("short")]).err().map(|p| p.len()), Some(1));
        // Through rustls's trait: sealed and opened now; replaced secrets do not open it.
        let t = SharedTickets::new(read(std::slice::from_ref(&good)).unwrap());
        let ticket = rustls::server::ProducesTickets::encrypt(&t, b"v").unwrap();
        assert_eq!(rustls::server::ProducesTickets::decrypt(&t, &ticket), Some(b"v".to_vec()));
        assert_eq!(t.files(), 1);
        t.replace(read(&[secret_file(dir.path(), "k9", &[9u8, 8, 7].repeat(20))]).unwrap());
        assert_eq!(rustls::server::ProducesTickets::decrypt(&t, &ticket), None);
    }
}
