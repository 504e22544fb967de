//! The durable embedded store's files: an append-only journal of the store's mutations and snapshots of its
//! whole state, in one data dir that one process at a time may open.
//!
//! ```text
//! <data-dir>/LOCK                              flock(2) held while a core has the dir open
//! <data-dir>/snapshot-<lsn, 20 digits>.snap    the state after record <lsn>
//! <data-dir>/journal-<first lsn, 20 digits>.wal  records from <first lsn> on
//! ```
//!
//! **Journal.** Every mutation is one record (its inputs and the store clock's `now`, JSON), numbered by a log
//! sequence number (LSN) that grows by one per record. Records are written in *frames*, one frame per group
//! commit (all the records that arrived while the previous frame was being synced):
//!
//! ```text
//! frame   = magic u32 "WKJ1" | len u32 | crc32 u32 | payload (len bytes)       little-endian
//! payload = first lsn u64 | count u32 | count × (record len u32 | record bytes)
//! ```
//!
//! The CRC covers the payload. A frame is written with one positional write and made durable with one
//! `fdatasync` before any of its records is acknowledged; the next frame is written only after that. So after
//! a crash, only the last frame of the last journal file can be incomplete:
//!
//! - **torn tail**: a frame that fails its checks (short, bad CRC, zeros) with no valid frame after it in the
//!   file: its records were never acknowledged; it is logged and cut away (the file truncated), never half
//!   applied (a frame is all or nothing).
//! - **corruption in the middle**: a bad frame followed by a valid one, a bad frame in a journal that is not
//!   the last, a gap in the LSNs, or a snapshot whose checksum fails: acknowledged data is damaged, and
//!   [`recover`] refuses with a message naming the file and offset instead of dropping it silently.
//!
//! **Snapshot.** `magic "WKSNAP01" | lsn u64 | len u64 | crc32 u32 | payload`, written to a `.tmp` file,
//! fsynced, renamed into place, and the dir fsynced; only then are the journals it covers deleted. Start-up
//! loads the newest snapshot and replays the journal records after its LSN.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// First bytes of every journal frame ("WKJ1").
const FRAME_MAGIC: u32 = u32::from_le_bytes(*b"WKJ1");
/// Frame header: magic, length, CRC.
const FRAME_HEADER: usize = 12;
/// First bytes of a snapshot file.
const SNAP_MAGIC: &[u8; 8] = b"WKSNAP01";
/// Snapshot header: magic, lsn, length, CRC.
const SNAP_HEADER: usize = 8 + 8 + 8 + 4;

/// The exclusive lock on a data dir: released when dropped (or when the process dies).
#[derive(Debug)]
pub struct DirLock {
    _file: File,
}

/// Creates `dir` if needed and takes its lock, or says why not (not a dir, not writable, in use).
pub fn lock_dir(dir: &Path) -> Result<DirLock, String> {
    if dir.exists() && !dir.is_dir() {
        return Err(format!("data-dir {} is not a directory", dir.display()));
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("data-dir {}: cannot create it: {e}", dir.display()))?;
    let path = dir.join("LOCK");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| format!("data-dir {}: cannot open {}: {e} (is the dir writable?)", dir.display(), path.display()))?;
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(e) if e == rustix::io::Errno::WOULDBLOCK => {
            let holder = std::fs::read_to_string(&path).unwrap_or_default();
            return Err(format!(
                "data-dir {} is in use by another wicket core (pid {}): two processes must never share one data dir",
                dir.display(),
                holder.trim()
            ));
        }
        Err(e) => return Err(format!("data-dir {}: cannot lock {}: {e}", dir.display(), path.display())),
    }
    // For the message above; the lock, not this text, is what excludes.
    let _ = file.set_len(0);
    let _ = file.write_all_at(std::process::id().to_string().as_bytes(), 0);
    // A write probe, so a read-only dir is refused at start and not at the first hold.
    let probe = dir.join("write-probe.tmp");
    std::fs::write(&probe, b"probe")
        .and_then(|()| std::fs::remove_file(&probe))
        .map_err(|e| format!("data-dir {}: not writable: {e}", dir.display()))?;
    Ok(DirLock { _file: file })
}

/// fsyncs a directory, so the names created, renamed or removed in it are durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

fn journal_name(first: u64) -> String {
    format!("journal-{first:020}.wal")
}

fn snapshot_name(lsn: u64) -> String {
    format!("snapshot-{lsn:020}.snap")
}

fn number_in(name: &str, prefix: &str, suffix: &str) -> Option<u64> {
    name.strip_prefix(prefix)?.strip_suffix(suffix)?.parse().ok()
}

/// Encodes one record into a frame body under construction.
pub fn push_record(body: &mut Vec<u8>, record: &[u8]) {
    body.extend_from_slice(&(record.len() as u32).to_le_bytes());
    body.extend_from_slice(record);
}

/// One frame holding `count` records (each pushed with [`push_record`]) starting at `first_lsn`.
pub fn frame(first_lsn: u64, count: u32, records: &[u8]) -> Vec<u8> {
    let mut payload = Vec::with_capacity(12 + records.len());
    payload.extend_from_slice(&first_lsn.to_le_bytes());
    payload.extend_from_slice(&count.to_le_bytes());
    payload.extend_from_slice(records);
    let mut out = Vec::with_capacity(FRAME_HEADER + payload.len());
    out.extend_from_slice(&FRAME_MAGIC.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
    out
}

fn u32_at(b: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?))
}

/// A frame that passed every check: its records and where it ends.
struct Frame {
    first_lsn: u64,
    records: Vec<Vec<u8>>,
    end: usize,
}

/// The frame at offset `o`, if one is there whole and intact.
fn frame_at(b: &[u8], o: usize) -> Option<Frame> {
    if u32_at(b, o)? != FRAME_MAGIC {
        return None;
    }
    let len = u32_at(b, o + 4)? as usize;
    let crc = u32_at(b, o + 8)?;
    let payload = b.get(o + FRAME_HEADER..(o + FRAME_HEADER).checked_add(len)?)?;
    if len < 12 || crc32fast::hash(payload) != crc {
        return None;
    }
    let first_lsn = u64_at(payload, 0)?;
    let count = u32_at(payload, 8)? as usize;
    let mut records = Vec::with_capacity(count.min(1 << 16));
    let mut p = 12;
    for _ in 0..count {
        let n = u32_at(payload, p)? as usize;
        records.push(payload.get(p + 4..(p + 4).checked_add(n)?)?.to_vec());
        p += 4 + n;
    }
    (p == payload.len()).then_some(Frame { first_lsn, records, end: o + FRAME_HEADER + len })
}

/// How a journal file ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tail {
    /// Every byte belongs to a valid frame.
    Clean,
    /// An incomplete last frame from `at` to the end of the file (`bytes` long): never acknowledged.
    Torn { at: u64, bytes: u64 },
    /// A bad frame at `at` with a valid frame after it (at `next`): damaged acknowledged data.
    Corrupt { at: u64, next: u64 },
}

/// What one journal file holds.
#[derive(Debug)]
pub struct Scan {
    /// `(lsn, record)` in order.
    pub records: Vec<(u64, Vec<u8>)>,
    /// Bytes of valid frames from the start.
    pub valid_len: u64,
    pub tail: Tail,
}

/// Reads the frames of one journal file's bytes.
pub fn scan(b: &[u8]) -> Scan {
    let mut records = Vec::new();
    let mut o = 0usize;
    while o < b.len() {
        match frame_at(b, o) {
            Some(f) => {
                for (i, r) in f.records.into_iter().enumerate() {
                    records.push((f.first_lsn + i as u64, r));
                }
                o = f.end;
            }
            None => {
                // A valid frame further on means the damage is not a torn last write.
                let next = (o + 1..b.len().saturating_sub(FRAME_HEADER - 1)).find(|&p| frame_at(b, p).is_some());
                let tail = match next {
                    Some(p) => Tail::Corrupt { at: o as u64, next: p as u64 },
                    None => Tail::Torn { at: o as u64, bytes: (b.len() - o) as u64 },
                };
                return Scan { records, valid_len: o as u64, tail };
            }
        }
    }
    Scan { records, valid_len: o as u64, tail: Tail::Clean }
}

/// The state on disk, ready to be replayed.
#[derive(Debug, Default)]
pub struct Recovered {
    /// The newest snapshot: its LSN and payload.
    pub snapshot: Option<(u64, Vec<u8>)>,
    /// The journal records after the snapshot, contiguous: `(lsn, record)`.
    pub records: Vec<(u64, Vec<u8>)>,
    /// The last LSN in the state (0 when empty).
    pub last_lsn: u64,
    /// The last journal file, its first LSN and valid length: where appends continue.
    pub segment: Option<(PathBuf, u64, u64)>,
    /// What was cut from a torn tail, for the log.
    pub torn: Option<String>,
}

/// Reads the data dir: newest snapshot, then every journal record after it (at most `upto` when given).
/// With `repair`, a torn tail of the last journal is truncated away and leftover `.tmp` files are removed.
/// Damage to acknowledged data is an error naming the file.
pub fn recover(dir: &Path, upto: Option<u64>, repair: bool) -> Result<Recovered, String> {
    let mut snaps = Vec::new();
    let mut journals = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| format!("data-dir {}: cannot list it: {e}", dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("data-dir {}: {e}", dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(n) = number_in(&name, "snapshot-", ".snap") {
            snaps.push(n);
        } else if let Some(n) = number_in(&name, "journal-", ".wal") {
            journals.push(n);
        } else if repair && name.ends_with(".tmp") {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    snaps.sort_unstable();
    journals.sort_unstable();
    let mut out = Recovered::default();
    if let Some(&lsn) = snaps.iter().rev().find(|&&l| upto.is_none_or(|u| l <= u)) {
        let path = dir.join(snapshot_name(lsn));
        let payload = read_snapshot(&path, lsn)?;
        out.snapshot = Some((lsn, payload));
        out.last_lsn = lsn;
    }
    let base = out.last_lsn;
    let n = journals.len();
    for (i, &first) in journals.iter().enumerate() {
        let path = dir.join(journal_name(first));
        let mut bytes = Vec::new();
        File::open(&path)
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let s = scan(&bytes);
        let last = i + 1 == n;
        match s.tail {
            Tail::Clean => {}
            Tail::Torn { at, bytes: torn } if last => {
                let msg = format!(
                    "{}: torn tail of {torn} bytes at offset {at} (a write cut short by a crash; never acknowledged) cut away",
                    path.display()
                );
                if repair {
                    let f = OpenOptions::new().write(true).open(&path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
                    f.set_len(at).and_then(|()| f.sync_all()).map_err(|e| format!("cannot truncate {}: {e}", path.display()))?;
                }
                out.torn = Some(msg);
            }
            Tail::Torn { at, .. } => {
                return Err(format!(
                    "{} is damaged at offset {at} and is not the last journal: acknowledged data is missing; refusing to start \
                     (restore the data dir from a backup, or move it away to start empty)",
                    path.display()
                ));
            }
            Tail::Corrupt { at, next } => {
                return Err(format!(
                    "{} is corrupt at offset {at} (a valid record follows at offset {next}): acknowledged data is damaged; \
                     refusing to start (restore the data dir from a backup, or move it away to start empty)",
                    path.display()
                ));
            }
        }
        if let Some((lsn, _)) = s.records.first()
            && *lsn != first
        {
            return Err(format!("{} starts at record {lsn}, its name says {first}: refusing to start", path.display()));
        }
        for (lsn, rec) in s.records {
            if lsn <= base || upto.is_some_and(|u| lsn > u) {
                continue;
            }
            if lsn != out.last_lsn + 1 {
                return Err(format!(
                    "journal records {}..{} are missing before {} (record {lsn}): refusing to start",
                    out.last_lsn + 1,
                    lsn - 1,
                    path.display()
                ));
            }
            out.last_lsn = lsn;
            out.records.push((lsn, rec));
        }
        if last {
            out.segment = Some((path, first, s.valid_len));
        }
    }
    Ok(out)
}

fn read_snapshot(path: &Path, lsn: u64) -> Result<Vec<u8>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let bad = |why: &str| {
        format!(
            "snapshot {} is {why}: refusing to start (restore the data dir from a backup, or move it away to start empty)",
            path.display()
        )
    };
    if bytes.len() < SNAP_HEADER || &bytes[..8] != SNAP_MAGIC {
        return Err(bad("not a snapshot (bad header)"));
    }
    let (Some(l), Some(len), Some(crc)) = (u64_at(&bytes, 8), u64_at(&bytes, 16), u32_at(&bytes, 24)) else {
        return Err(bad("truncated"));
    };
    let payload = &bytes[SNAP_HEADER..];
    if l != lsn || payload.len() as u64 != len {
        return Err(bad("truncated or misnamed"));
    }
    if crc32fast::hash(payload) != crc {
        return Err(bad("corrupt (bad checksum)"));
    }
    Ok(payload.to_vec())
}

/// Writes the snapshot of the state after record `lsn`: temp file, fsync, rename, fsync of the dir.
/// Returns how many bytes it wrote.
pub fn write_snapshot(dir: &Path, lsn: u64, payload: &[u8]) -> io::Result<u64> {
    let name = snapshot_name(lsn);
    let tmp = dir.join(format!("{name}.tmp"));
    let mut bytes = Vec::with_capacity(SNAP_HEADER + payload.len());
    bytes.extend_from_slice(SNAP_MAGIC);
    bytes.extend_from_slice(&lsn.to_le_bytes());
    bytes.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    bytes.extend_from_slice(payload);
    let result = (|| {
        let f = OpenOptions::new().write(true).create(true).truncate(true).open(&tmp)?;
        f.write_all_at(&bytes, 0)?;
        f.sync_all()?;
        std::fs::rename(&tmp, dir.join(&name))?;
        sync_dir(dir)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map(|()| bytes.len() as u64)
}

/// Removes what the snapshot at `snap_lsn` made useless: older snapshots and every journal before the one
/// that starts at `keep_from`.
pub fn remove_covered(dir: &Path, snap_lsn: u64, keep_from: u64) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let old = number_in(&name, "snapshot-", ".snap").is_some_and(|n| n < snap_lsn)
            || number_in(&name, "journal-", ".wal").is_some_and(|n| n < keep_from);
        if old {
            std::fs::remove_file(entry.path())?;
        }
    }
    sync_dir(dir)
}

/// The journal file being appended to.
#[derive(Debug)]
pub struct Segment {
    file: File,
    pub path: PathBuf,
    /// LSN of its first record.
    pub first: u64,
    /// Bytes of valid frames: where the next frame goes.
    pub len: u64,
}

impl Segment {
    /// Opens an existing journal to append after its `len` valid bytes.
    pub fn open(path: PathBuf, first: u64, len: u64) -> io::Result<Segment> {
        let file = OpenOptions::new().write(true).open(&path)?;
        Ok(Segment { file, path, first, len })
    }

    /// Creates the journal that starts at record `first` (and makes its name durable).
    pub fn create(dir: &Path, first: u64) -> io::Result<Segment> {
        let path = dir.join(journal_name(first));
        let file = OpenOptions::new().write(true).create_new(true).open(&path)?;
        file.sync_all()?;
        sync_dir(dir)?;
        Ok(Segment { file, path, first, len: 0 })
    }

    /// Writes one frame after the valid bytes and makes it durable (`fdatasync`). On an error the frame may be
    /// partly on disk: call [`cut`](Self::cut) before the next append.
    pub fn append(&mut self, frame: &[u8]) -> io::Result<()> {
        self.file.write_all_at(frame, self.len)?;
        self.file.sync_data()?;
        self.len += frame.len() as u64;
        Ok(())
    }

    /// Truncates the file to its valid bytes (after a failed append) and syncs.
    pub fn cut(&mut self) -> io::Result<()> {
        self.file.set_len(self.len)?;
        self.file.sync_all()
    }
}

/// Free bytes for unprivileged users on the file system of `dir`.
pub fn free_bytes(dir: &Path) -> io::Result<u64> {
    let s = rustix::fs::statvfs(dir).map_err(io::Error::from)?;
    Ok(s.f_bavail.saturating_mul(s.f_frsize))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(recs: &[&str]) -> Vec<u8> {
        let mut b = Vec::new();
        for r in recs {
            push_record(&mut b, r.as_bytes());
        }
        b
    }

    fn journal(dir: &Path, frames: &[Vec<u8>]) -> PathBuf {
        let path = dir.join(journal_name(1));
        std::fs::write(&path, frames.concat()).unwrap();
        path
    }

    fn texts(r: &Recovered) -> Vec<(u64, String)> {
        r.records.iter().map(|(l, b)| (*l, String::from_utf8_lossy(b).into_owned())).collect()
    }

    #[test]
    fn frames_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        journal(dir.path(), &[frame(1, 2, &body(&["a", "bb"])), frame(3, 1, &body(&["ccc"]))]);
        let r = recover(dir.path(), None, true).unwrap();
        assert_eq!(texts(&r), [(1, "a".into()), (2, "bb".into()), (3, "ccc".into())]);
        assert_eq!(r.last_lsn, 3);
        assert!(r.torn.is_none());
    }

    #[test]
    fn a_torn_tail_is_cut_never_half_applied() {
        let dir = tempfile::tempdir().unwrap();
        let f1 = frame(1, 1, &body(&["one"]));
        let f2 = frame(2, 3, &body(&["two", "three", "four"]));
        // Every cut of the last frame: short header, short payload.
        for cut in 1..f2.len() {
            let path = journal(dir.path(), &[f1.clone(), f2[..cut].to_vec()]);
            let r = recover(dir.path(), None, true).unwrap();
            assert_eq!(texts(&r), [(1, "one".into())], "cut at {cut}");
            assert!(r.torn.is_some(), "cut at {cut}");
            assert_eq!(std::fs::metadata(&path).unwrap().len(), f1.len() as u64, "truncated to the valid frames");
        }
        // Zeros where the last frame should be (size extended, data never written).
        journal(dir.path(), &[f1.clone(), vec![0; 300]]);
        let r = recover(dir.path(), None, true).unwrap();
        assert_eq!(r.last_lsn, 1);
    }

    #[test]
    fn a_crc_mismatch_at_the_tail_is_truncated() {
        let dir = tempfile::tempdir().unwrap();
        let f1 = frame(1, 1, &body(&["one"]));
        let mut f2 = frame(2, 1, &body(&["two"]));
        let last = f2.len() - 1;
        f2[last] ^= 0x55;
        let path = journal(dir.path(), &[f1.clone(), f2]);
        let r = recover(dir.path(), None, true).unwrap();
        assert_eq!(texts(&r), [(1, "one".into())]);
        assert!(r.torn.as_deref().unwrap_or_default().contains("torn tail"), "{:?}", r.torn);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), f1.len() as u64);
        // And appends continue after it.
        let mut seg = Segment::open(path, 1, f1.len() as u64).unwrap();
        seg.append(&frame(2, 1, &body(&["two again"]))).unwrap();
        let r = recover(dir.path(), None, true).unwrap();
        assert_eq!(texts(&r), [(1, "one".into()), (2, "two again".into())]);
    }

    #[test]
    fn corruption_in_the_middle_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut f1 = frame(1, 1, &body(&["one"]));
        f1[FRAME_HEADER + 13] ^= 1;
        let f2 = frame(2, 1, &body(&["two"]));
        let path = journal(dir.path(), &[f1, f2]);
        let before = std::fs::read(&path).unwrap();
        let err = recover(dir.path(), None, true).unwrap_err();
        assert!(err.contains("corrupt at offset 0") && err.contains("refusing to start"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), before, "nothing was cut");
    }

    #[test]
    fn damage_in_an_older_journal_or_a_gap_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let f1 = frame(1, 1, &body(&["one"]));
        std::fs::write(dir.path().join(journal_name(1)), &f1[..f1.len() - 2]).unwrap();
        std::fs::write(dir.path().join(journal_name(2)), frame(2, 1, &body(&["two"]))).unwrap();
        let err = recover(dir.path(), None, true).unwrap_err();
        assert!(err.contains("not the last journal"), "{err}");
        std::fs::write(dir.path().join(journal_name(1)), &f1).unwrap();
        std::fs::remove_file(dir.path().join(journal_name(2))).unwrap();
        std::fs::write(dir.path().join(journal_name(5)), frame(5, 1, &body(&["five"]))).unwrap();
        let err = recover(dir.path(), None, true).unwrap_err();
        assert!(err.contains("records 2..4 are missing"), "{err}");
    }

    #[test]
    fn snapshot_then_journal() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(journal_name(1)), frame(1, 2, &body(&["1", "2"]))).unwrap();
        write_snapshot(dir.path(), 2, b"state at 2").unwrap();
        let mut seg = Segment::create(dir.path(), 3).unwrap();
        seg.append(&frame(3, 1, &body(&["3"]))).unwrap();
        remove_covered(dir.path(), 2, 3).unwrap();
        assert!(!dir.path().join(journal_name(1)).exists());
        let r = recover(dir.path(), None, true).unwrap();
        assert_eq!(r.snapshot, Some((2, b"state at 2".to_vec())));
        assert_eq!(texts(&r), [(3, "3".into())]);
        // A damaged snapshot is refused, not skipped.
        let snap = dir.path().join(snapshot_name(2));
        let mut b = std::fs::read(&snap).unwrap();
        let last = b.len() - 1;
        b[last] ^= 1;
        std::fs::write(&snap, b).unwrap();
        let err = recover(dir.path(), None, true).unwrap_err();
        assert!(err.contains("bad checksum"), "{err}");
    }

    #[test]
    fn a_second_lock_on_the_dir_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let _held = lock_dir(dir.path()).unwrap();
        let err = lock_dir(dir.path()).unwrap_err();
        assert!(err.contains("in use by another wicket core"), "{err}");
        let file = dir.path().join("file");
        std::fs::write(&file, b"").unwrap();
        let err = lock_dir(&file).unwrap_err();
        assert!(err.contains("not a directory"), "{err}");
    }

    #[test]
    fn a_write_error_is_an_error_not_a_panic() {
        // /dev/full answers every write with ENOSPC.
        let Ok(file) = OpenOptions::new().write(true).open("/dev/full") else { return };
        let mut seg = Segment { file, path: "/dev/full".into(), first: 1, len: 0 };
        let err = seg.append(&frame(1, 1, &body(&["x"]))).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(28), "{err}");
        assert_eq!(seg.len, 0, "a failed append leaves the valid length alone");
    }
}
