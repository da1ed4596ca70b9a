//! The embedded store's journal: replay claims, and the entries read back
//! only by their key (a signed request's state), both held in memory and made
//! durable by an append-only file that the group commit writes.
//!
//! **Replay claims.** Every signed envelope and every uAgents message claims
//! its key once (see [`super::Backend::claim_once`]). In a sled tree each
//! claim was an insert into a copy-on-write B-tree: sled 0.34 clones the node
//! it changes and hands the page to its own threads, which the profile of
//! bench row 3 showed as the largest cost after the signatures themselves
//! (malloc of node copies, sled's write-out threads and the context switches
//! to them). A claim needs far less: "was this key seen before its expiry?"
//! So the live claims are a hash set of 16-byte digests (SHA-256 of the key,
//! so a long key costs no memory and two keys collide only with a 2^-64
//! chance) with their expiry, and each claim or release appends one
//! fixed-size record.
//!
//! **Keyed entries** ([`super::Backend::put_keyed`]). A signed request's
//! final state is written once per request and read back only by its key
//! (STATUS), never scanned or listed. In a tree it cost the same node copy,
//! and its commit a whole sled flush: with the claims already out of sled,
//! that was a fifth of the node's CPU in bench row 3. So these entries live
//! here too, by the digest of their collection and key, with their expiry and
//! value; each write appends one record, and a commit with only such writes
//! and claims costs one append and one `fdatasync`. (Inserting into the tree
//! and journaling only a redo record was measured first: sled's own flushes
//! then cost about what they saved.)
//!
//! The commit that must precede a reply ([`super::Store::commit`]) writes the
//! records queued so far and syncs them, grouped across concurrent requests
//! like sled's own flush, so whatever a reply depends on survives a crash.
//!
//! **Bounds.** A live claim costs about 40 bytes of memory, and at most
//! `store.max_claims_in_memory` are held; keyed entries are held up to
//! `store.max_keyed_bytes_in_memory` (their values plus [`ENTRY_OVERHEAD`]
//! each). Beyond either bound writes spill into the sled trees, the old path:
//! slower, on disk, bounded only by the disk. While any claim is spilled every
//! claim checks the `replay` tree as well, under the same lock, so a key is
//! still admitted once. A keyed entry missing from memory is read from its
//! tree (spilled, or written there before this journal held such entries).
//! The bound is checked when a key enters memory; a key already held is
//! replaced there even if its new value grows past the bound (a request's
//! state changes one word), because moving a held entry to the tree would
//! need the tree's write durable before the journal drops the entry, and sled
//! also flushes its trees on its own schedule. For the same reason a write to
//! memory leaves an older spilled copy in the tree rather than removing it:
//! memory is read first, and the older copy expires first (a request state's
//! expiry is its write time plus a fixed TTL). Expired claims and entries
//! leave memory at each sweep. The journal is rewritten with only what is live
//! at every start and when it has grown to [`COMPACT_FACTOR`] times the size
//! of that rewrite (and at least [`COMPACT_MIN_BYTES`]).
//!
//! **Format.** An 8-byte magic, then records. A claim or release is
//! [`CLAIM_BYTES`]: kind, digest, expiry (Unix ms, little endian), CRC-32 of
//! the rest. An entry is kind, digest, expiry, the value's length (u32), the
//! value, and a CRC-32 of the rest. A torn record at the end (a crash
//! mid-write of a record no reply depended on) ends the reading; the rewrite at
//! start drops it. A journal of the first format ([`MAGIC_V1`], claims only)
//! is read as well; a node older than the keyed entries refuses the new magic
//! rather than stop reading at the first record it does not know.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;
use sha2::{Digest, Sha256};

use super::{Collection, MemoryBounds, Result, StoreError, now_ms};

const MAGIC: &[u8; 8] = b"AGJOURN2";
const MAGIC_V1: &[u8; 8] = b"AGCLAIM1";
const CLAIM_BYTES: usize = 29;
const CLAIM: u8 = 1;
const RELEASE: u8 = 2;
const ENTRY: u8 = 3;
/// Kind, digest, expiry and length of an entry record, before its value.
const ENTRY_HEADER_BYTES: usize = 1 + 16 + 8 + 4;
/// Memory one keyed entry costs beyond its value's bytes (digest, expiry,
/// the value's allocation and the hash table's slot), for the bound.
const ENTRY_OVERHEAD: usize = 64;
/// Largest value a new key brings into memory; a larger one goes to its tree.
const MAX_KEYED_VALUE: usize = 64 << 10;

/// The journal is rewritten when it is this many times the size of a
/// journal of just what is live (and at least [`COMPACT_MIN_BYTES`]).
const COMPACT_FACTOR: u64 = 4;
const COMPACT_MIN_BYTES: u64 = 100_000 * CLAIM_BYTES as u64;

type KeyDigest = [u8; 16];

/// The first 16 bytes of the SHA-256 of `parts`, concatenated.
fn digest_of(parts: &[&[u8]]) -> KeyDigest {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part);
    }
    let mut short = [0u8; 16];
    short.copy_from_slice(&hasher.finalize()[..16]);
    short
}

/// A replay claim's digest: its key.
fn digest(key: &[u8]) -> KeyDigest {
    digest_of(&[key])
}

/// A keyed entry's digest: its collection's name and its key.
fn entry_digest(collection: Collection, key: &[u8]) -> KeyDigest {
    digest_of(&[collection.table_name().as_bytes(), b"\0", key])
}

fn claim_record(kind: u8, digest: &KeyDigest, expires_at_ms: u64) -> [u8; CLAIM_BYTES] {
    let mut out = [0u8; CLAIM_BYTES];
    out[0] = kind;
    out[1..17].copy_from_slice(digest);
    out[17..25].copy_from_slice(&expires_at_ms.to_le_bytes());
    let crc = crc32fast::hash(&out[..25]);
    out[25..].copy_from_slice(&crc.to_le_bytes());
    out
}

fn entry_record_bytes(value: &[u8]) -> usize {
    ENTRY_HEADER_BYTES + value.len() + 4
}

fn push_entry_record(out: &mut Vec<u8>, digest: &KeyDigest, entry: &KeyedEntry) {
    let start = out.len();
    out.push(ENTRY);
    out.extend_from_slice(digest);
    out.extend_from_slice(&entry.expires_at_ms.to_le_bytes());
    out.extend_from_slice(&(entry.value.len() as u32).to_le_bytes());
    out.extend_from_slice(&entry.value);
    let crc = crc32fast::hash(&out[start..]);
    out.extend_from_slice(&crc.to_le_bytes());
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

/// A keyed entry held in memory: its expiry (Unix ms, `u64::MAX` for none) and value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct KeyedEntry {
    pub expires_at_ms: u64,
    pub value: Box<[u8]>,
}

impl KeyedEntry {
    fn memory(&self) -> usize {
        self.value.len() + ENTRY_OVERHEAD
    }
}

/// What memory says of a keyed entry.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Lookup {
    Live(KeyedEntry),
    /// Held, but its expiry has passed (not swept yet).
    Expired,
    /// Not in memory: the tree may hold it.
    Absent,
}

#[derive(Default)]
struct Held {
    claims: HashMap<KeyDigest, u64>,
    entries: HashMap<KeyDigest, KeyedEntry>,
    /// The held entries' values, in bytes: with their number, what they cost
    /// in memory and in a rewrite of the journal.
    entry_value_bytes: usize,
    /// Records not yet handed to the file.
    queued: Vec<u8>,
    /// Bytes in the file or queued, for the rewrite's threshold.
    journal_bytes: u64,
}

impl Held {
    fn insert_entry(&mut self, digest: KeyDigest, entry: KeyedEntry) {
        self.entry_value_bytes += entry.value.len();
        if let Some(old) = self.entries.insert(digest, entry) {
            self.entry_value_bytes -= old.value.len();
        }
    }

    fn remove_entry(&mut self, digest: &KeyDigest) {
        if let Some(old) = self.entries.remove(digest) {
            self.entry_value_bytes -= old.value.len();
        }
    }

    /// Memory the entries take, by [`KeyedEntry::memory`].
    fn entry_memory(&self) -> usize {
        self.entry_value_bytes + self.entries.len() * ENTRY_OVERHEAD
    }

    fn drop_expired(&mut self, now: u64) -> usize {
        let before = self.claims.len() + self.entries.len();
        self.claims.retain(|_, at| *at > now);
        let mut freed = 0;
        self.entries.retain(|_, entry| {
            let live = entry.expires_at_ms > now;
            if !live {
                freed += entry.value.len();
            }
            live
        });
        self.entry_value_bytes -= freed;
        before - self.claims.len() - self.entries.len()
    }

    /// Bytes a journal of just what is live would take.
    fn live_bytes(&self) -> u64 {
        let claims = self.claims.len() * CLAIM_BYTES;
        let entries = self.entry_value_bytes + self.entries.len() * entry_record_bytes(&[]);
        (MAGIC.len() + claims + entries) as u64
    }
}

pub(super) struct Journal {
    held: Mutex<Held>,
    /// The open journal (`None` for a temporary store: memory only). Only the
    /// flusher and the rewrite write it.
    file: Mutex<Option<File>>,
    path: Option<PathBuf>,
    bounds: MemoryBounds,
    /// Whether any claim went to the sled tree since it was last found empty.
    spilled: AtomicBool,
    /// A write failed: the next flush rewrites the journal whole.
    broken: AtomicBool,
    pub(super) progress: Progress,
}

impl Journal {
    /// The journal at `path`: what is live in it read back, then rewritten with only that.
    pub(super) fn open(path: &Path, bounds: MemoryBounds) -> Result<Journal> {
        let mut held = Held::default();
        match File::open(path) {
            Ok(file) => read_journal(path, file, &mut held)?,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(io_error(path, error)),
        }
        let journal = Journal::with(held, Some(path.to_path_buf()), bounds);
        journal.rewrite()?;
        Ok(journal)
    }

    /// Memory only (a temporary store).
    pub(super) fn in_memory(bounds: MemoryBounds) -> Journal {
        Journal::with(Held::default(), None, bounds)
    }

    fn with(held: Held, path: Option<PathBuf>, bounds: MemoryBounds) -> Journal {
        Journal {
            held: Mutex::new(held),
            file: Mutex::new(None),
            path,
            bounds: MemoryBounds {
                max_claims: bounds.max_claims.max(1),
                ..bounds
            },
            spilled: AtomicBool::new(false),
            broken: AtomicBool::new(false),
            progress: Progress::default(),
        }
    }

    /// `true` for the first live claim of `key`. `spill` claims in the sled
    /// tree when memory is full; `spilled_live` says whether the tree holds a
    /// live claim of `key` (both run under the journal's lock, so the memory
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
        let mut held = self.held.lock();
        if held.claims.get(&digest).is_some_and(|&at| at > now) {
            return Ok(false);
        }
        if self.spilled.load(Ordering::Acquire) && spilled_live()? {
            return Ok(false);
        }
        if held.claims.len() >= self.bounds.max_claims && !held.claims.contains_key(&digest) {
            self.spilled.store(true, Ordering::Release);
            return spill();
        }
        held.claims.insert(digest, expires_at_ms);
        self.queue(held, |held| {
            held.queued
                .extend_from_slice(&claim_record(CLAIM, &digest, expires_at_ms));
        });
        Ok(true)
    }

    /// Forget the claim of `key` (in memory; the caller removes a spilled one).
    pub(super) fn release(&self, key: &[u8]) {
        let digest = digest(key);
        let mut held = self.held.lock();
        if held.claims.remove(&digest).is_some() {
            self.queue(held, |held| {
                held.queued.extend_from_slice(&claim_record(RELEASE, &digest, 0));
            });
        }
    }

    /// Hold `value` under `collection` and `key` until `expires_at_ms` (`None`:
    /// until overwritten), or, for a new key that does not fit the bound,
    /// `spill` it to the tree (under the journal's lock, so a racing write of
    /// the same key cannot land in memory between the check and the spill).
    pub(super) fn put(
        &self,
        collection: Collection,
        key: &[u8],
        value: &[u8],
        expires_at_ms: Option<u64>,
        spill: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let digest = entry_digest(collection, key);
        let entry = KeyedEntry {
            expires_at_ms: expires_at_ms.unwrap_or(u64::MAX),
            value: value.into(),
        };
        let mut held = self.held.lock();
        let fits = held.entries.contains_key(&digest)
            || (value.len() <= MAX_KEYED_VALUE
                && held.entry_memory() + entry.memory() <= self.bounds.max_keyed_bytes);
        if !fits {
            return spill();
        }
        // Held and queued under one lock: a rewrite between the two would
        // drop the queued record without the entry in its snapshot.
        held.insert_entry(digest, entry);
        self.queue(held, |held| {
            if let Some(entry) = held.entries.get(&digest) {
                push_entry_record(&mut held.queued, &digest, entry);
            }
        });
        Ok(())
    }

    /// What memory holds under `collection` and `key`.
    pub(super) fn get(&self, collection: Collection, key: &[u8]) -> Lookup {
        let digest = entry_digest(collection, key);
        match self.held.lock().entries.get(&digest) {
            Some(entry) if entry.expires_at_ms > now_ms() => Lookup::Live(entry.clone()),
            Some(_) => Lookup::Expired,
            None => Lookup::Absent,
        }
    }

    /// Queue one record for the next flush. A temporary store has no file:
    /// nothing is queued, and its commits have nothing of this to wait for.
    fn queue(&self, mut held: parking_lot::MutexGuard<'_, Held>, append: impl FnOnce(&mut Held)) {
        if self.path.is_none() {
            return;
        }
        let before = held.queued.len();
        append(&mut held);
        held.journal_bytes += (held.queued.len() - before) as u64;
        drop(held);
        self.progress.wrote();
    }

    /// Whether claims may be in the sled tree (so releases and sweeps look there).
    pub(super) fn has_spilled(&self) -> bool {
        self.spilled.load(Ordering::Acquire)
    }

    /// Stop consulting the sled tree if `is_empty` finds it empty: checked
    /// under the journal's lock, so no claim spills between the check and this.
    pub(super) fn end_spill_if(&self, is_empty: impl FnOnce() -> bool) {
        let _held = self.held.lock();
        if is_empty() {
            self.spilled.store(false, Ordering::Release);
        }
    }

    /// Drop expired claims and entries from memory; how many went.
    pub(super) fn sweep(&self) -> usize {
        self.held.lock().drop_expired(now_ms())
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
        let queued = std::mem::take(&mut self.held.lock().queued);
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

    /// Whether the journal has grown enough past what is live to rewrite it.
    pub(super) fn wants_rewrite(&self) -> bool {
        let held = self.held.lock();
        self.path.is_some()
            && !self.broken.load(Ordering::Acquire)
            && held.journal_bytes > COMPACT_MIN_BYTES.max(COMPACT_FACTOR * held.live_bytes())
    }

    /// Replace the journal with one holding just what is live. Records
    /// queued meanwhile are in the snapshot (their claims and entries are in
    /// memory), so they are dropped from the queue; later ones go to the new file.
    pub(super) fn rewrite(&self) -> Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let mut file = self.file.lock();
        let (snapshot, claims, entries) = {
            let mut held = self.held.lock();
            held.drop_expired(now_ms());
            let mut snapshot = Vec::with_capacity(held.live_bytes() as usize);
            snapshot.extend_from_slice(MAGIC);
            for (digest, at) in &held.claims {
                snapshot.extend_from_slice(&claim_record(CLAIM, digest, *at));
            }
            for (digest, entry) in &held.entries {
                push_entry_record(&mut snapshot, digest, entry);
            }
            held.queued.clear();
            held.journal_bytes = snapshot.len() as u64;
            (snapshot, held.claims.len(), held.entries.len())
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
                tracing::debug!(claims, entries, "store journal rewritten");
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
    StoreError::Unavailable(format!("store journal {}: {error}", path.display()))
}

/// One record read back.
enum Record<'a> {
    /// A claim or release.
    Fixed { kind: u8, digest: KeyDigest, at: u64 },
    Entry {
        digest: KeyDigest,
        at: u64,
        value: &'a [u8],
    },
}

/// The record at the start of `bytes` and what follows it; `None` if it is
/// torn (short, a bad CRC or an unknown kind).
fn next_record(bytes: &[u8]) -> Option<(Record<'_>, &[u8])> {
    let kind = *bytes.first()?;
    let mut digest = [0u8; 16];
    digest.copy_from_slice(bytes.get(1..17)?);
    let at = u64::from_le_bytes(bytes.get(17..25)?.try_into().ok()?);
    let (record, length) = match kind {
        CLAIM | RELEASE => (Record::Fixed { kind, digest, at }, CLAIM_BYTES),
        ENTRY => {
            let value_len = u32::from_le_bytes(bytes.get(25..29)?.try_into().ok()?) as usize;
            let end = ENTRY_HEADER_BYTES.checked_add(value_len)?;
            let value = bytes.get(ENTRY_HEADER_BYTES..end)?;
            (Record::Entry { digest, at, value }, end + 4)
        }
        _ => return None,
    };
    let crc = u32::from_le_bytes(bytes.get(length - 4..length)?.try_into().ok()?);
    if crc != crc32fast::hash(&bytes[..length - 4]) {
        return None;
    }
    Some((record, &bytes[length..]))
}

/// Apply the journal's records in order; a torn tail ends the reading.
fn read_journal(path: &Path, mut file: File, held: &mut Held) -> Result<()> {
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(|e| io_error(path, e))?;
    if bytes.is_empty() {
        return Ok(());
    }
    let Some(mut records) = bytes.strip_prefix(MAGIC).or_else(|| bytes.strip_prefix(MAGIC_V1)) else {
        return Err(StoreError::Unavailable(format!(
            "{} is not the store's journal (refusing to start without the replay window it should hold)",
            path.display()
        )));
    };
    let now = now_ms();
    while !records.is_empty() {
        let Some((record, rest)) = next_record(records) else {
            tracing::warn!(path = %path.display(), "the store journal ends in a torn record; the rest is ignored");
            return Ok(());
        };
        records = rest;
        // A release, or a write that has expired since, leaves nothing live.
        match record {
            Record::Fixed {
                kind: CLAIM,
                digest,
                at,
            } if at > now => {
                held.claims.insert(digest, at);
            }
            Record::Fixed { digest, .. } => {
                held.claims.remove(&digest);
            }
            Record::Entry { digest, at, value } if at > now => {
                let entry = KeyedEntry {
                    expires_at_ms: at,
                    value: value.into(),
                };
                held.insert_entry(digest, entry);
            }
            Record::Entry { digest, .. } => {
                held.remove_entry(&digest);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn never() -> Result<bool> {
        panic!("the sled tree was consulted with memory to spare")
    }

    fn bounds(max_claims: usize) -> MemoryBounds {
        MemoryBounds {
            max_claims,
            max_keyed_bytes: 1 << 20,
        }
    }

    const C: Collection = Collection::Negotiations;

    fn memory_only() -> Result<()> {
        panic!("a keyed entry went to the tree with memory to spare")
    }

    fn live(journal: &Journal, key: &[u8]) -> Option<Vec<u8>> {
        match journal.get(C, key) {
            Lookup::Live(entry) => Some(entry.value.into_vec()),
            _ => None,
        }
    }

    #[test]
    fn a_key_is_claimed_once_until_it_expires_and_again_after_release() {
        let journal = Journal::in_memory(bounds(10));
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
        let memory = Journal::in_memory(bounds(10));
        assert!(memory.claim(b"k", later, never, never).unwrap());
        memory.release(b"k");
        assert!(
            memory.progress.all_durable(),
            "a temporary store's commit would wait on nothing"
        );
        let dir = tempfile::tempdir().unwrap();
        let file = Journal::open(&dir.path().join("claims"), bounds(10)).unwrap();
        assert!(file.claim(b"k", later, never, never).unwrap());
        assert!(!file.progress.all_durable());
    }

    #[test]
    fn claims_survive_a_reopen_and_a_torn_tail_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("claims");
        let later = now_ms() + 60_000;
        {
            let journal = Journal::open(&path, bounds(10)).unwrap();
            assert!(journal.claim(b"kept", later, never, never).unwrap());
            assert!(journal.claim(b"released", later, never, never).unwrap());
            assert!(journal.claim(b"expiring", now_ms() + 50, never, never).unwrap());
            journal.release(b"released");
            journal.flush().unwrap();
        }
        // A crash mid-append: half a record at the end.
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(&claim_record(CLAIM, &digest(b"torn"), later)[..10])
            .unwrap();
        drop(file);
        std::thread::sleep(std::time::Duration::from_millis(60));
        let journal = Journal::open(&path, bounds(10)).unwrap();
        assert!(!journal.claim(b"kept", later, never, never).unwrap());
        assert!(journal.claim(b"released", later, never, never).unwrap());
        assert!(journal.claim(b"expiring", later, never, never).unwrap());
        assert!(journal.claim(b"torn", later, never, never).unwrap());
        // The rewrite at open left exactly the live claims.
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len(), MAGIC.len() + CLAIM_BYTES);
    }

    #[test]
    fn a_file_that_is_not_a_journal_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("claims");
        std::fs::write(&path, b"something else entirely, 29+ bytes long").unwrap();
        let error = Journal::open(&path, bounds(10)).err().unwrap();
        assert!(error.to_string().contains("not the store's journal"), "{error}");
    }

    #[test]
    fn past_the_memory_bound_claims_spill_and_are_checked_there() {
        let journal = Journal::in_memory(bounds(1));
        let later = now_ms() + 60_000;
        assert!(journal.claim(b"a", later, never, never).unwrap());
        assert!(journal.claim(b"b", later, never, || Ok(true)).unwrap());
        assert!(journal.has_spilled());
        // While spilled, the tree's answer counts even for a key memory lacks.
        assert!(!journal.claim(b"b", later, || Ok(true), never).unwrap());
        journal.release(b"a");
        assert!(journal.claim(b"c", later, || Ok(false), never).unwrap());
    }

    #[test]
    fn keyed_entries_are_read_back_by_collection_and_key_until_they_expire() {
        let journal = Journal::in_memory(bounds(10));
        let later = Some(now_ms() + 60_000);
        journal.put(C, b"k", b"\"one\"", later, memory_only).unwrap();
        journal.put(C, b"k", b"\"two\"", later, memory_only).unwrap();
        assert_eq!(live(&journal, b"k").as_deref(), Some(&b"\"two\""[..]));
        assert_eq!(journal.get(Collection::Sessions, b"k"), Lookup::Absent);
        journal
            .put(C, b"old", b"1", Some(now_ms() - 1), memory_only)
            .unwrap();
        assert_eq!(journal.get(C, b"old"), Lookup::Expired);
        assert_eq!(journal.sweep(), 1);
        assert_eq!(journal.get(C, b"old"), Lookup::Absent);
        journal.put(C, b"forever", b"1", None, memory_only).unwrap();
        assert!(live(&journal, b"forever").is_some());
    }

    #[test]
    fn keyed_entries_survive_a_reopen_with_the_claims_and_a_torn_entry_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("claims");
        let later = now_ms() + 60_000;
        {
            let journal = Journal::open(&path, bounds(10)).unwrap();
            journal
                .put(C, b"state", b"\"PROCESSING\"", Some(later), memory_only)
                .unwrap();
            assert!(journal.claim(b"claim", later, never, never).unwrap());
            journal
                .put(C, b"state", b"\"COMPLETED\"", Some(later), memory_only)
                .unwrap();
            journal
                .put(C, b"expiring", b"1", Some(now_ms() + 50), memory_only)
                .unwrap();
            journal.flush().unwrap();
        }
        // A crash mid-append: an entry record cut short.
        let mut torn = Vec::new();
        let entry = KeyedEntry {
            expires_at_ms: later,
            value: b"\"torn\"".to_vec().into(),
        };
        push_entry_record(&mut torn, &entry_digest(C, b"torn"), &entry);
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(&torn[..torn.len() - 1]).unwrap();
        drop(file);
        std::thread::sleep(std::time::Duration::from_millis(60));
        let journal = Journal::open(&path, bounds(10)).unwrap();
        assert_eq!(live(&journal, b"state").as_deref(), Some(&b"\"COMPLETED\""[..]));
        assert!(!journal.claim(b"claim", later, never, never).unwrap());
        assert_eq!(journal.get(C, b"expiring"), Lookup::Absent);
        assert_eq!(journal.get(C, b"torn"), Lookup::Absent);
        // The rewrite at open left one claim and one entry.
        let state = KeyedEntry {
            expires_at_ms: later,
            value: b"\"COMPLETED\"".to_vec().into(),
        };
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(
            bytes.len(),
            MAGIC.len() + CLAIM_BYTES + entry_record_bytes(&state.value)
        );
    }

    #[test]
    fn a_journal_of_the_first_format_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("claims");
        let later = now_ms() + 60_000;
        let mut old = MAGIC_V1.to_vec();
        old.extend_from_slice(&claim_record(CLAIM, &digest(b"seen"), later));
        std::fs::write(&path, old).unwrap();
        let journal = Journal::open(&path, bounds(10)).unwrap();
        assert!(!journal.claim(b"seen", later, never, never).unwrap());
        assert!(std::fs::read(&path).unwrap().starts_with(MAGIC));
    }

    #[test]
    fn past_the_byte_bound_new_keys_go_to_the_tree_and_held_ones_stay() {
        let journal = Journal::in_memory(MemoryBounds {
            max_claims: 10,
            max_keyed_bytes: 2 * (ENTRY_OVERHEAD + 1),
        });
        let later = Some(now_ms() + 60_000);
        journal.put(C, b"a", b"1", later, memory_only).unwrap();
        journal.put(C, b"b", b"2", later, memory_only).unwrap();
        let mut spilled = Vec::new();
        journal
            .put(C, b"c", b"3", later, || {
                spilled.push("c");
                Ok(())
            })
            .unwrap();
        assert_eq!(spilled, ["c"]);
        assert_eq!(journal.get(C, b"c"), Lookup::Absent);
        // A held key is replaced in memory, even by a value past the bound.
        journal.put(C, b"b", b"22", later, memory_only).unwrap();
        assert_eq!(live(&journal, b"b").as_deref(), Some(&b"22"[..]));
        // A new key whose value is over the per-value limit goes to the tree.
        let too_large = vec![b'1'; MAX_KEYED_VALUE + 1];
        let roomy = Journal::in_memory(bounds(10));
        let mut went = false;
        roomy
            .put(C, b"big", &too_large, later, || {
                went = true;
                Ok(())
            })
            .unwrap();
        assert!(went);
        assert_eq!(roomy.get(C, b"big"), Lookup::Absent);
    }
}
