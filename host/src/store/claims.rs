//! Replay claims on the embedded store: a set in memory, made durable by an
//! append-only journal that the group commit writes.
//!
//! Every signed envelope and every uAgents message claims its key once (see
//! [`super::Backend::claim_once`]). In a sled tree each claim was an insert
//! into a copy-on-write B-tree: sled 0.34 clones the node it changes and
//! hands the page to its own threads, which the profile of bench row 3 showed
//! as the largest cost after the signatures themselves (malloc of node copies,
//! sled's write-out threads and the context switches to them). A claim needs
//! far less: "was this key seen before its expiry?" So the live claims are a
//! hash set of 16-byte digests (SHA-256 of the key, so a long key costs no
//! memory and two keys collide only with a 2^-64 chance) with their expiry,
//! and each claim or release appends one fixed-size record to a journal file.
//! The commit that must precede a reply ([`super::Store::commit`]) writes the
//! records queued so far and `fdatasync`s them, grouped across concurrent
//! requests like sled's own flush, so a claim a reply depends on survives a
//! crash.
//!
//! Bounds: a live claim costs about 40 bytes of memory, and at most
//! `store.max_claims_in_memory` are held. Beyond that (a flood within one
//! replay window) claims spill into the sled tree `replay`
//! (the old path: slower, on disk, unbounded only by the disk), and while
//! anything is spilled every claim checks it as well, under the same lock, so
//! a key is still admitted once. Expired claims leave memory at each sweep;
//! the journal is rewritten with only the live claims when it has grown to
//! several times their number, and at every start.
//!
//! Journal format: an 8-byte magic, then records of [`RECORD_BYTES`]: kind
//! (claim or release), the digest, the expiry (Unix ms, little endian) and a
//! CRC-32 of the rest. A torn record at the end (a crash mid-write of a
//! record no reply depended on) ends the reading; the rewrite at start drops it.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;
use sha2::{Digest, Sha256};

use super::{Result, StoreError, now_ms};

const MAGIC: &[u8; 8] = b"AGCLAIM1";
const RECORD_BYTES: usize = 29;
const CLAIM: u8 = 1;
const RELEASE: u8 = 2;

/// The journal is rewritten when it holds more than this many records per
/// live claim (and at least [`COMPACT_MIN_RECORDS`]).
const COMPACT_FACTOR: u64 = 4;
const COMPACT_MIN_RECORDS: u64 = 100_000;

type ClaimDigest = [u8; 16];

fn digest(key: &[u8]) -> ClaimDigest {
    let full = Sha256::digest(key);
    let mut short = [0u8; 16];
    short.copy_from_slice(&full[..16]);
    short
}

fn record(kind: u8, digest: &ClaimDigest, expires_at_ms: u64) -> [u8; RECORD_BYTES] {
    let mut out = [0u8; RECORD_BYTES];
    out[0] = kind;
    out[1..17].copy_from_slice(digest);
    out[17..25].copy_from_slice(&expires_at_ms.to_le_bytes());
    let crc = crc32fast::hash(&out[..25]);
    out[25..].copy_from_slice(&crc.to_le_bytes());
    out
}

/// Writes counted against the writes made durable, so a commit with nothing
/// of its own to wait for returns at once.
#[derive(Default)]
pub(super) struct Progress {
    written: AtomicU64,
    durable: AtomicU64,
}

impl Progress {
    /// After a write has been made (in memory); what a flush started later covers.
    pub(super) fn wrote(&self) {
        self.written.fetch_add(1, Ordering::AcqRel);
    }

    /// The writes made so far: read before a flush starts.
    pub(super) fn mark(&self) -> u64 {
        self.written.load(Ordering::Acquire)
    }

    /// Whether writes up to `mark` still wait for a flush.
    pub(super) fn behind(&self, mark: u64) -> bool {
        self.durable.load(Ordering::Acquire) < mark
    }

    /// Every write up to `mark` is durable now.
    pub(super) fn made_durable(&self, mark: u64) {
        self.durable.fetch_max(mark, Ordering::AcqRel);
    }

    pub(super) fn all_durable(&self) -> bool {
        self.durable.load(Ordering::Acquire) >= self.written.load(Ordering::Acquire)
    }
}

struct Claims {
    live: HashMap<ClaimDigest, u64>,
    /// Records not yet handed to the file.
    queued: Vec<u8>,
    /// Records in the file, for the rewrite's threshold.
    journal_records: u64,
}

pub(super) struct ClaimJournal {
    claims: Mutex<Claims>,
    /// The open journal (`None` for a temporary store: memory only). Only the
    /// flusher and the rewrite write it.
    file: Mutex<Option<File>>,
    path: Option<PathBuf>,
    max_in_memory: usize,
    /// Whether any claim went to the sled tree since it was last found empty.
    spilled: AtomicBool,
    /// A write failed: the next flush rewrites the journal whole.
    broken: AtomicBool,
    pub(super) progress: Progress,
}

impl ClaimJournal {
    /// The journal at `path`: its live claims read back, then rewritten with only those.
    pub(super) fn open(path: &Path, max_in_memory: usize) -> Result<ClaimJournal> {
        let mut live = HashMap::new();
        match File::open(path) {
            Ok(file) => read_journal(path, file, &mut live)?,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(io_error(path, error)),
        }
        let journal = ClaimJournal::with(live, Some(path.to_path_buf()), max_in_memory);
        journal.rewrite()?;
        Ok(journal)
    }

    /// Claims in memory only (a temporary store).
    pub(super) fn in_memory(max_in_memory: usize) -> ClaimJournal {
        ClaimJournal::with(HashMap::new(), None, max_in_memory)
    }

    fn with(live: HashMap<ClaimDigest, u64>, path: Option<PathBuf>, max_in_memory: usize) -> ClaimJournal {
        ClaimJournal {
            claims: Mutex::new(Claims {
                live,
                queued: Vec::new(),
                journal_records: 0,
            }),
            file: Mutex::new(None),
            path,
            max_in_memory: max_in_memory.max(1),
            spilled: AtomicBool::new(false),
            broken: AtomicBool::new(false),
            progress: Progress::default(),
        }
    }

    /// `true` for the first live claim of `key`. `spill` claims in the sled
    /// tree when memory is full; `spilled_live` says whether the tree holds a
    /// live claim of `key` (both run under the claims lock, so the memory
    /// check and the tree agree).
    pub(super) fn claim(
        &self,
        key: &[u8],
        expires_at_ms: u64,
        spilled_live: impl FnOnce() -> Result<bool>,
        spill: impl FnOnce() -> Result<bool>,
    ) -> Result<bool> {
        let digest = digest(key);
        let now = now_ms();
        let mut claims = self.claims.lock();
        if claims.live.get(&digest).is_some_and(|&at| at > now) {
            return Ok(false);
        }
        if self.spilled.load(Ordering::Acquire) && spilled_live()? {
            return Ok(false);
        }
        if claims.live.len() >= self.max_in_memory && !claims.live.contains_key(&digest) {
            self.spilled.store(true, Ordering::Release);
            return spill();
        }
        claims.live.insert(digest, expires_at_ms);
        self.journal(claims, record(CLAIM, &digest, expires_at_ms));
        Ok(true)
    }

    /// Forget the claim of `key` (in memory; the caller removes a spilled one).
    pub(super) fn release(&self, key: &[u8]) {
        let digest = digest(key);
        let mut claims = self.claims.lock();
        if claims.live.remove(&digest).is_some() {
            self.journal(claims, record(RELEASE, &digest, 0));
        }
    }

    /// Queue `record` for the next flush. A temporary store has no file:
    /// nothing is queued, and its commits have nothing of this to wait for.
    fn journal(&self, mut claims: parking_lot::MutexGuard<'_, Claims>, record: [u8; RECORD_BYTES]) {
        if self.path.is_none() {
            return;
        }
        claims.queued.extend_from_slice(&record);
        drop(claims);
        self.progress.wrote();
    }

    /// Whether claims may be in the sled tree (so releases and sweeps look there).
    pub(super) fn has_spilled(&self) -> bool {
        self.spilled.load(Ordering::Acquire)
    }

    /// Stop consulting the sled tree if `is_empty` finds it empty: checked
    /// under the claims lock, so no claim spills between the check and this.
    pub(super) fn end_spill_if(&self, is_empty: impl FnOnce() -> bool) {
        let _claims = self.claims.lock();
        if is_empty() {
            self.spilled.store(false, Ordering::Release);
        }
    }

    /// Drop expired claims from memory; how many went.
    pub(super) fn sweep(&self) -> usize {
        let now = now_ms();
        let mut claims = self.claims.lock();
        let before = claims.live.len();
        claims.live.retain(|_, at| *at > now);
        before - claims.live.len()
    }

    /// Write and sync the queued records (the flusher's half of a commit).
    /// After a failed write the file may end in a torn record that would hide
    /// every later one, so the next flush rewrites the whole journal instead.
    pub(super) fn flush(&self) -> Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        if self.broken.load(Ordering::Acquire) {
            return self.rewrite();
        }
        let mut file = self.file.lock();
        let queued = {
            let mut claims = self.claims.lock();
            claims.journal_records += (claims.queued.len() / RECORD_BYTES) as u64;
            std::mem::take(&mut claims.queued)
        };
        if queued.is_empty() {
            return Ok(());
        }
        let appended = (|| {
            let file = match &mut *file {
                Some(file) => file,
                None => file.insert(OpenOptions::new().append(true).open(path)?),
            };
            file.write_all(&queued)?;
            file.sync_data()
        })();
        appended.map_err(|error| {
            self.broken.store(true, Ordering::Release);
            *file = None;
            io_error(path, error)
        })
    }

    /// Whether the journal has grown enough past its live claims to rewrite it.
    pub(super) fn wants_rewrite(&self) -> bool {
        let claims = self.claims.lock();
        self.path.is_some()
            && !self.broken.load(Ordering::Acquire)
            && claims.journal_records > COMPACT_MIN_RECORDS.max(COMPACT_FACTOR * claims.live.len() as u64)
    }

    /// Replace the journal with one holding just the live claims. Records
    /// queued meanwhile are in the snapshot (their claims are in the set), so
    /// they are dropped from the queue; later ones go to the new file.
    pub(super) fn rewrite(&self) -> Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let mut file = self.file.lock();
        let (snapshot, count) = {
            let mut claims = self.claims.lock();
            let now = now_ms();
            claims.live.retain(|_, at| *at > now);
            let mut snapshot = Vec::with_capacity(MAGIC.len() + claims.live.len() * RECORD_BYTES);
            snapshot.extend_from_slice(MAGIC);
            for (digest, at) in &claims.live {
                snapshot.extend_from_slice(&record(CLAIM, digest, *at));
            }
            claims.queued.clear();
            claims.journal_records = claims.live.len() as u64;
            (snapshot, claims.live.len())
        };
        let fresh = path.with_extension("claims-rewrite");
        let written = (|| {
            let mut out = BufWriter::new(File::create(&fresh)?);
            out.write_all(&snapshot)?;
            let out = out.into_inner().map_err(|e| e.into_error())?;
            out.sync_all()?;
            std::fs::rename(&fresh, path)?;
            if let Some(dir) = path.parent() {
                File::open(dir)?.sync_all()?;
            }
            OpenOptions::new().append(true).open(path)
        })();
        match written {
            Ok(reopened) => {
                *file = Some(reopened);
                self.broken.store(false, Ordering::Release);
                tracing::debug!(claims = count, "replay-claim journal rewritten");
                Ok(())
            }
            Err(error) => {
                self.broken.store(true, Ordering::Release);
                Err(io_error(path, error))
            }
        }
    }
}

fn io_error(path: &Path, error: std::io::Error) -> StoreError {
    StoreError::Unavailable(format!("replay-claim journal {}: {error}", path.display()))
}

/// Apply the journal's records in order; a torn tail ends the reading.
fn read_journal(path: &Path, mut file: File, live: &mut HashMap<ClaimDigest, u64>) -> Result<()> {
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(|e| io_error(path, e))?;
    if bytes.is_empty() {
        return Ok(());
    }
    let Some(records) = bytes.strip_prefix(MAGIC) else {
        return Err(StoreError::Unavailable(format!(
            "{} is not a replay-claim journal (refusing to start without the replay window it should hold)",
            path.display()
        )));
    };
    let now = now_ms();
    let mut chunks = records.chunks_exact(RECORD_BYTES);
    for chunk in chunks.by_ref() {
        let crc = u32::from_le_bytes([chunk[25], chunk[26], chunk[27], chunk[28]]);
        if crc != crc32fast::hash(&chunk[..25]) {
            tracing::warn!(path = %path.display(), "replay-claim journal ends in a torn record; the rest is ignored");
            return Ok(());
        }
        let mut digest = [0u8; 16];
        digest.copy_from_slice(&chunk[1..17]);
        let mut at = [0u8; 8];
        at.copy_from_slice(&chunk[17..25]);
        let at = u64::from_le_bytes(at);
        // A release, or a claim that has expired since, leaves nothing live.
        if chunk[0] == CLAIM && at > now {
            live.insert(digest, at);
        } else {
            live.remove(&digest);
        }
    }
    if !chunks.remainder().is_empty() {
        tracing::warn!(path = %path.display(), "replay-claim journal ends in a partial record; it is ignored");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn never() -> Result<bool> {
        panic!("the sled tree was consulted with memory to spare")
    }

    #[test]
    fn a_key_is_claimed_once_until_it_expires_and_again_after_release() {
        let journal = ClaimJournal::in_memory(10);
        let later = now_ms() + 60_000;
        assert!(journal.claim(b"k", later, never, never).unwrap());
        assert!(!journal.claim(b"k", later, never, never).unwrap());
        journal.release(b"k");
        assert!(journal.claim(b"k", later, never, never).unwrap());
        assert!(journal.claim(b"gone", now_ms() - 1, never, never).unwrap());
        assert!(journal.claim(b"gone", later, never, never).unwrap());
    }

    #[test]
    fn only_a_journal_with_a_file_queues_records_to_make_durable() {
        let later = now_ms() + 60_000;
        let memory = ClaimJournal::in_memory(10);
        assert!(memory.claim(b"k", later, never, never).unwrap());
        memory.release(b"k");
        assert!(
            memory.progress.all_durable(),
            "a temporary store's commit would wait on nothing"
        );
        let dir = tempfile::tempdir().unwrap();
        let file = ClaimJournal::open(&dir.path().join("claims"), 10).unwrap();
        assert!(file.claim(b"k", later, never, never).unwrap());
        assert!(!file.progress.all_durable());
    }

    #[test]
    fn claims_survive_a_reopen_and_a_torn_tail_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("claims");
        let later = now_ms() + 60_000;
        {
            let journal = ClaimJournal::open(&path, 10).unwrap();
            assert!(journal.claim(b"kept", later, never, never).unwrap());
            assert!(journal.claim(b"released", later, never, never).unwrap());
            assert!(journal.claim(b"expiring", now_ms() + 50, never, never).unwrap());
            journal.release(b"released");
            journal.flush().unwrap();
        }
        // A crash mid-append: half a record at the end.
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(&record(CLAIM, &digest(b"torn"), later)[..10])
            .unwrap();
        drop(file);
        std::thread::sleep(std::time::Duration::from_millis(60));
        let journal = ClaimJournal::open(&path, 10).unwrap();
        assert!(!journal.claim(b"kept", later, never, never).unwrap());
        assert!(journal.claim(b"released", later, never, never).unwrap());
        assert!(journal.claim(b"expiring", later, never, never).unwrap());
        assert!(journal.claim(b"torn", later, never, never).unwrap());
        // The rewrite at open left exactly the live claims.
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len(), MAGIC.len() + RECORD_BYTES);
    }

    #[test]
    fn a_file_that_is_not_a_journal_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("claims");
        std::fs::write(&path, b"something else entirely, 29+ bytes long").unwrap();
        let error = ClaimJournal::open(&path, 10).err().unwrap();
        assert!(
            error.to_string().contains("not a replay-claim journal"),
            "{error}"
        );
    }

    #[test]
    fn past_the_memory_bound_claims_spill_and_are_checked_there() {
        let journal = ClaimJournal::in_memory(1);
        let later = now_ms() + 60_000;
        assert!(journal.claim(b"a", later, never, never).unwrap());
        assert!(journal.claim(b"b", later, never, || Ok(true)).unwrap());
        assert!(journal.has_spilled());
        // While spilled, the tree's answer counts even for a key memory lacks.
        assert!(!journal.claim(b"b", later, || Ok(true), never).unwrap());
        journal.release(b"a");
        assert!(journal.claim(b"c", later, || Ok(false), never).unwrap());
    }
}
