//! The store's own suite, run against every backend: each test is an
//! `async fn(Store)` and [`on_every_backend!`] makes one `#[tokio::test]` of
//! it per backend, so sled and PostgreSQL are held to the same behaviour.

use serde::de::DeserializeOwned;

use super::*;

/// One test per backend for each named `async fn(Store)`.
macro_rules! on_every_backend {
    ($($name:ident),* $(,)?) => {
        mod on_sled {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::sled_store()).await;
                }
            )*
        }

        mod on_postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::postgres_store().await).await;
                }
            )*
        }
    };
}

on_every_backend!(
    many_concurrent_commits_all_complete,
    expired_entries_read_as_absent_and_are_swept,
    insert_new_refuses_a_live_duplicate_but_reuses_an_expired_one,
    racing_inserts_of_one_key_admit_exactly_one,
    racing_claims_of_one_key_admit_exactly_one_until_released_or_expired,
    compare_and_swap_needs_the_current_value_and_admits_one_racer,
    any_json_value_round_trips_and_compares_regardless_of_key_order,
    take_hands_an_entry_to_exactly_one_racer,
    keys_are_listed_by_prefix_in_order_within_the_limit,
    history_appends_in_order_and_is_bounded,
    history_pages_follow_the_cursor_within_entry_and_byte_caps,
    an_entry_larger_than_the_byte_cap_is_a_page_of_its_own,
    the_byte_quota_refuses_an_append_and_ending_the_history_frees_it,
    concurrent_appenders_lose_nothing,
    concurrent_appenders_cannot_overrun_the_entry_limit,
    sweeping_an_expired_conversation_ends_its_history,
    keyed_entries_are_read_back_by_key_until_they_expire,
    a_unit_reads_its_own_writes_and_commits_them,
    racing_claims_in_units_admit_exactly_one,
    put_all_writes_every_entry_across_collections,
);

fn sled_store() -> Store {
    Store::temporary().expect("temporary sled store")
}

/// A fresh database of the test process's one PostgreSQL cluster.
async fn postgres_store() -> Store {
    let url = postgres::tests::fresh_database().await;
    let backend = postgres::tests::backend(&url, postgres::tests::TIMEOUT).await;
    Store::new(std::sync::Arc::new(backend))
}

async fn many_concurrent_commits_all_complete(store: Store) {
    let tasks: Vec<_> = (0..64u32)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .put(Collection::Meta, &i.to_be_bytes(), &i, None)
                    .await
                    .unwrap();
                store.commit().await
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    assert_eq!(
        store
            .get::<u32>(Collection::Meta, &7u32.to_be_bytes())
            .await
            .unwrap(),
        Some(7)
    );
}

async fn expired_entries_read_as_absent_and_are_swept(store: Store) {
    store
        .put(Collection::Replay, b"old", &1, Some(now_ms() - 1))
        .await
        .unwrap();
    store
        .put(Collection::Replay, b"live", &2, Some(now_ms() + 60_000))
        .await
        .unwrap();
    store.put(Collection::Replay, b"forever", &3, None).await.unwrap();
    assert_eq!(store.get::<i32>(Collection::Replay, b"old").await.unwrap(), None);
    assert!(store.expired(Collection::Replay, b"old").await.unwrap());
    assert!(!store.expired(Collection::Replay, b"live").await.unwrap());
    assert!(!store.expired(Collection::Replay, b"unknown").await.unwrap());
    assert_eq!(store.sweep().await.unwrap(), 1);
    assert!(!store.expired(Collection::Replay, b"old").await.unwrap());
    assert_eq!(
        store.get::<i32>(Collection::Replay, b"live").await.unwrap(),
        Some(2)
    );
    assert_eq!(
        store.get::<i32>(Collection::Replay, b"forever").await.unwrap(),
        Some(3)
    );
    let (value, expiry) = store
        .get_with_expiry::<i32>(Collection::Replay, b"live")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(value, 2);
    assert!(expiry.is_some_and(|at| at > now_ms()));
}

async fn insert_new_refuses_a_live_duplicate_but_reuses_an_expired_one(store: Store) {
    let later = Some(now_ms() + 60_000);
    assert!(
        store
            .insert_new(Collection::Replay, b"k", &1, later)
            .await
            .unwrap()
    );
    assert!(
        !store
            .insert_new(Collection::Replay, b"k", &2, later)
            .await
            .unwrap()
    );
    assert_eq!(store.get::<i32>(Collection::Replay, b"k").await.unwrap(), Some(1));
    store
        .put(Collection::Replay, b"e", &1, Some(now_ms() - 1))
        .await
        .unwrap();
    assert!(
        store
            .insert_new(Collection::Replay, b"e", &5, None)
            .await
            .unwrap()
    );
    assert_eq!(store.get::<i32>(Collection::Replay, b"e").await.unwrap(), Some(5));
}

async fn racing_inserts_of_one_key_admit_exactly_one(store: Store) {
    for round in 0..20u32 {
        let key = format!("race-{round}");
        let racers: Vec<_> = (0..8u32)
            .map(|racer| {
                let store = store.clone();
                let key = key.clone();
                tokio::spawn(async move {
                    store
                        .insert_new(
                            Collection::Replay,
                            key.as_bytes(),
                            &racer,
                            Some(now_ms() + 60_000),
                        )
                        .await
                        .unwrap()
                })
            })
            .collect();
        let mut admitted = 0;
        for racer in racers {
            admitted += usize::from(racer.await.unwrap());
        }
        assert_eq!(admitted, 1, "round {round}");
    }
}

async fn racing_claims_of_one_key_admit_exactly_one_until_released_or_expired(store: Store) {
    for round in 0..20u32 {
        let key = format!("claim-{round}");
        let racers: Vec<_> = (0..8)
            .map(|_| {
                let store = store.clone();
                let key = key.clone();
                tokio::spawn(
                    async move { store.claim_once(key.as_bytes(), now_ms() + 60_000).await.unwrap() },
                )
            })
            .collect();
        let mut admitted = 0;
        for racer in racers {
            admitted += usize::from(racer.await.unwrap());
        }
        assert_eq!(admitted, 1, "round {round}");
    }
    store.commit().await.unwrap();
    store.release_claim(b"claim-0").await.unwrap();
    assert!(store.claim_once(b"claim-0", now_ms() + 60_000).await.unwrap());
    assert!(store.claim_once(b"brief", now_ms() - 1).await.unwrap());
    assert!(store.claim_once(b"brief", now_ms() + 60_000).await.unwrap());
    assert!(!store.claim_once(b"brief", now_ms() + 60_000).await.unwrap());
    store.commit().await.unwrap();
}

async fn compare_and_swap_needs_the_current_value_and_admits_one_racer(store: Store) {
    let record = serde_json::json!({"state": "offered", "price": 3, "nested": {"a": 1, "b": [1, 2]}});
    store
        .put(Collection::Negotiations, b"o", &record, None)
        .await
        .unwrap();
    let stale = serde_json::json!({"state": "other"});
    let accepted = serde_json::json!({"state": "accepted"});
    assert!(
        !store
            .update(Collection::Negotiations, b"o", &stale, &accepted, None)
            .await
            .unwrap()
    );
    assert!(
        !store
            .update(Collection::Negotiations, b"missing", &record, &accepted, None)
            .await
            .unwrap()
    );
    let racers: Vec<_> = (0..8)
        .map(|_| {
            let store = store.clone();
            let (record, accepted) = (record.clone(), accepted.clone());
            tokio::spawn(async move {
                store
                    .update(Collection::Negotiations, b"o", &record, &accepted, None)
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut winners = 0;
    for racer in racers {
        winners += usize::from(racer.await.unwrap());
    }
    assert_eq!(winners, 1);
    assert_eq!(
        store
            .get::<serde_json::Value>(Collection::Negotiations, b"o")
            .await
            .unwrap(),
        Some(accepted.clone())
    );
    // An expired entry cannot be swapped.
    store
        .put(Collection::Negotiations, b"gone", &record, Some(now_ms() - 1))
        .await
        .unwrap();
    assert!(
        !store
            .update(Collection::Negotiations, b"gone", &record, &accepted, None)
            .await
            .unwrap()
    );
}

async fn any_json_value_round_trips_and_compares_regardless_of_key_order(store: Store) {
    // U+0000, non-ASCII, an emoji, big and fractional numbers, nesting.
    let value = serde_json::json!({
        "text": "nul \u{0} é \u{1F600}",
        "numbers": [u64::MAX, -1, 1.5, 1.0],
        "nested": {"z": null, "a": [true, {}]},
    });
    store.put(Collection::PluginKv, b"v", &value, None).await.unwrap();
    assert_eq!(
        store
            .get::<serde_json::Value>(Collection::PluginKv, b"v")
            .await
            .unwrap(),
        Some(value.clone())
    );
    assert!(
        !store
            .insert_new(Collection::PluginKv, b"v", &value, None)
            .await
            .unwrap()
    );
    // The same members spelled in another order (a struct serializes in field order).
    #[derive(serde::Serialize)]
    struct Reordered {
        z: u32,
        a: u32,
    }
    store
        .put(
            Collection::PluginKv,
            b"r",
            &serde_json::json!({"a": 1, "z": 2}),
            None,
        )
        .await
        .unwrap();
    let (expected, new) = (Reordered { z: 2, a: 1 }, Reordered { z: 3, a: 1 });
    assert!(
        store
            .update(Collection::PluginKv, b"r", &expected, &new, None)
            .await
            .unwrap()
    );
    assert_eq!(
        store
            .get::<serde_json::Value>(Collection::PluginKv, b"r")
            .await
            .unwrap(),
        Some(serde_json::json!({"a": 1, "z": 3}))
    );
}

async fn put_all_writes_every_entry_across_collections(store: Store) {
    let later = Some(now_ms() + 60_000);
    store
        .put_all(&[
            (Collection::A2aTasks, b"t1".to_vec(), json_value("state"), later),
            (
                Collection::A2aPushOutbox,
                b"t1\x00p\x002".to_vec(),
                json_value("second"),
                later,
            ),
            (
                Collection::A2aPushOutbox,
                b"t1\x00p\x001".to_vec(),
                json_value("first"),
                None,
            ),
        ])
        .await
        .unwrap();
    store.commit().await.unwrap();
    assert_eq!(
        store
            .get::<String>(Collection::A2aTasks, b"t1")
            .await
            .unwrap()
            .as_deref(),
        Some("state")
    );
    let owed = store
        .records::<String>(Collection::A2aPushOutbox, b"t1\x00", 10)
        .await
        .unwrap();
    let owed: Vec<&str> = owed.iter().map(|(_, value)| value.as_str()).collect();
    assert_eq!(owed, ["first", "second"]);
}

fn json_value(text: &str) -> serde_json::Value {
    serde_json::Value::String(text.to_string())
}

async fn take_hands_an_entry_to_exactly_one_racer(store: Store) {
    store
        .put(Collection::Approvals, b"a1", &"pending", Some(now_ms() + 60_000))
        .await
        .unwrap();
    let racers: Vec<_> = (0..8)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move { store.take::<String>(Collection::Approvals, b"a1").await.unwrap() })
        })
        .collect();
    let mut taken = Vec::new();
    for racer in racers {
        taken.extend(racer.await.unwrap());
    }
    assert_eq!(taken, vec!["pending".to_string()]);
    store
        .put(Collection::Approvals, b"old", &"pending", Some(now_ms() - 1))
        .await
        .unwrap();
    assert_eq!(
        store.take::<String>(Collection::Approvals, b"old").await.unwrap(),
        None
    );
    assert!(!store.remove(Collection::Approvals, b"old").await.unwrap());
}

async fn keys_are_listed_by_prefix_in_order_within_the_limit(store: Store) {
    for key in ["p\0b", "p\0a", "p\0c", "q\0a", "p"] {
        store
            .put(Collection::PluginKv, key.as_bytes(), &1, None)
            .await
            .unwrap();
    }
    let keys = store.keys(Collection::PluginKv, b"p\0", 10).await.unwrap();
    assert_eq!(keys, vec![b"p\0a".to_vec(), b"p\0b".to_vec(), b"p\0c".to_vec()]);
    let keys = store.keys(Collection::PluginKv, b"p\0", 2).await.unwrap();
    assert_eq!(keys.len(), 2);
    assert!(store.remove(Collection::PluginKv, b"p\0a").await.unwrap());
    assert!(!store.remove(Collection::PluginKv, b"p\0a").await.unwrap());
    assert_eq!(store.keys(Collection::PluginKv, b"", 100).await.unwrap().len(), 4);
    // Collections do not see each other's keys.
    assert!(store.keys(Collection::Meta, b"", 100).await.unwrap().is_empty());
}

async fn whole<T: DeserializeOwned>(store: &Store, id: &str) -> Vec<T> {
    store
        .history_page(id, None, usize::MAX, usize::MAX)
        .await
        .unwrap()
        .entries
}

async fn history_appends_in_order_and_is_bounded(store: Store) {
    for i in 0..3 {
        store.append_history("c1", &i, 3).await.unwrap();
    }
    store.append_history("c2", &9, 3).await.unwrap();
    assert_eq!(whole::<i32>(&store, "c1").await, vec![0, 1, 2]);
    let refused = store.append_history("c1", &3, 3).await.unwrap_err();
    assert!(refused.is_quota(), "{refused}");
    assert_eq!(whole::<i32>(&store, "c2").await, vec![9]);
    // An id that is a prefix of another ("c" of "c1") reads only its own entries.
    store.append_history("c", &7, 3).await.unwrap();
    assert_eq!(whole::<i32>(&store, "c").await, vec![7]);
}

async fn history_pages_follow_the_cursor_within_entry_and_byte_caps(store: Store) {
    for i in 0..10u32 {
        store.append_history("h", &i, 100).await.unwrap();
    }
    let mut read = Vec::new();
    let mut after = None;
    let mut pages = 0;
    loop {
        let page = store
            .history_page::<u32>("h", after, 3, usize::MAX)
            .await
            .unwrap();
        assert!(page.entries.len() <= 3);
        read.extend(page.entries);
        pages += 1;
        match page.next_after {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(read, (0..10).collect::<Vec<_>>());
    assert_eq!(pages, 4);
    // Each entry is one byte of JSON: a 4-byte cap gives four entries.
    let page = store.history_page::<u32>("h", Some(1), 100, 4).await.unwrap();
    assert_eq!(page.entries, vec![2, 3, 4, 5]);
    assert_eq!(page.next_after, Some(5));
    let after_last = store.history_page::<u32>("h", Some(9), 100, 100).await.unwrap();
    assert!(after_last.entries.is_empty());
    let past_everything = store
        .history_page::<u32>("h", Some(u64::MAX), 100, 100)
        .await
        .unwrap();
    assert!(past_everything.entries.is_empty());
    // The tail is the most recent entries that fit, oldest first.
    assert_eq!(
        store.history_tail::<u32>("h", 3, usize::MAX).await.unwrap(),
        vec![7, 8, 9]
    );
    assert_eq!(store.history_tail::<u32>("h", 100, 2).await.unwrap(), vec![8, 9]);
}

async fn an_entry_larger_than_the_byte_cap_is_a_page_of_its_own(store: Store) {
    let big = "x".repeat(1000);
    store.append_history("h", &"a", 10).await.unwrap();
    store.append_history("h", &big, 10).await.unwrap();
    store.append_history("h", &"b", 10).await.unwrap();
    let first = store.history_page::<String>("h", None, 10, 100).await.unwrap();
    assert_eq!(first.entries, vec!["a".to_string()]);
    let second = store
        .history_page::<String>("h", first.next_after, 10, 100)
        .await
        .unwrap();
    assert_eq!(second.entries, vec![big]);
    let third = store
        .history_page::<String>("h", second.next_after, 10, 100)
        .await
        .unwrap();
    assert_eq!(third.entries, vec!["b".to_string()]);
    assert_eq!(third.next_after, None);
}

async fn the_byte_quota_refuses_an_append_and_ending_the_history_frees_it(store: Store) {
    let store = store.with_history_quota(100);
    let entry = "y".repeat(38); // 40 bytes of JSON
    store.append_history("q", &entry, 1000).await.unwrap();
    store.append_history("q", &entry, 1000).await.unwrap();
    let refused = store.append_history("q", &entry, 1000).await.unwrap_err();
    assert!(refused.is_quota(), "{refused}");
    assert!(refused.to_string().contains("100 bytes"), "{refused}");
    // A smaller entry that still fits is taken; another history is unaffected.
    store.append_history("q", &"z", 1000).await.unwrap();
    store.append_history("other", &entry, 1000).await.unwrap();
    assert_eq!(whole::<String>(&store, "q").await.len(), 3);
    store.remove_history("q").await.unwrap();
    assert!(whole::<String>(&store, "q").await.is_empty());
    store.append_history("q", &entry, 1000).await.unwrap();
    store.append_history("q", &entry, 1000).await.unwrap();
}

async fn concurrent_appenders_lose_nothing(store: Store) {
    let writers: Vec<_> = (0..8u32)
        .map(|writer| {
            let store = store.clone();
            tokio::spawn(async move {
                for i in 0..50u32 {
                    store
                        .append_history("shared", &(writer * 1000 + i), 10_000)
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.unwrap();
    }
    let ordered = whole::<u32>(&store, "shared").await;
    let mut all = ordered.clone();
    assert_eq!(all.len(), 400);
    all.sort_unstable();
    let expected: Vec<u32> = (0..8).flat_map(|w| (0..50).map(move |i| w * 1000 + i)).collect();
    assert_eq!(all, expected);
    // Each writer's own entries stay in the order it appended them.
    for writer in 0..8 {
        let mine: Vec<u32> = ordered.iter().copied().filter(|v| v / 1000 == writer).collect();
        assert!(mine.windows(2).all(|w| w[0] < w[1]));
    }
}

async fn concurrent_appenders_cannot_overrun_the_entry_limit(store: Store) {
    let writers: Vec<_> = (0..8u32)
        .map(|writer| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut accepted = 0;
                for i in 0..50u32 {
                    if store
                        .append_history("capped", &(writer * 1000 + i), 100)
                        .await
                        .is_ok()
                    {
                        accepted += 1;
                    }
                }
                accepted
            })
        })
        .collect();
    let mut accepted = 0;
    for writer in writers {
        accepted += writer.await.unwrap();
    }
    assert_eq!(accepted, 100);
    assert_eq!(whole::<u32>(&store, "capped").await.len(), 100);
}

async fn sweeping_an_expired_conversation_ends_its_history(store: Store) {
    store
        .put(Collection::Conversations, b"gone", &1, Some(now_ms() - 1))
        .await
        .unwrap();
    store
        .put(Collection::Conversations, b"kept", &1, Some(now_ms() + 60_000))
        .await
        .unwrap();
    store.append_history("gone", &"a", 10).await.unwrap();
    store.append_history("kept", &"b", 10).await.unwrap();
    assert_eq!(store.sweep().await.unwrap(), 1);
    assert!(whole::<String>(&store, "gone").await.is_empty());
    assert_eq!(whole::<String>(&store, "kept").await, vec!["b".to_string()]);
    // The ended history starts afresh, within its limit again.
    store.append_history("gone", &"c", 1).await.unwrap();
}

async fn keyed_entries_are_read_back_by_key_until_they_expire(store: Store) {
    let c = Collection::Negotiations;
    let later = Some(now_ms() + 60_000);
    store.put_keyed(c, b"state", &"PROCESSING", later).await.unwrap();
    store.put_keyed(c, b"state", &"COMPLETED", later).await.unwrap();
    store.commit().await.unwrap();
    assert_eq!(
        store.get_keyed::<String>(c, b"state").await.unwrap().as_deref(),
        Some("COMPLETED")
    );
    assert_eq!(
        store
            .get_keyed::<String>(Collection::Sessions, b"state")
            .await
            .unwrap(),
        None
    );
    store.put_keyed(c, b"gone", &1, Some(now_ms() - 1)).await.unwrap();
    assert_eq!(store.get_keyed::<u32>(c, b"gone").await.unwrap(), None);
    // An entry written by a plain put (before keyed entries existed) reads back.
    store.put(c, b"older", &"FAILED", later).await.unwrap();
    assert_eq!(
        store.get_keyed::<String>(c, b"older").await.unwrap().as_deref(),
        Some("FAILED")
    );
}

/// sled only: every commit, waiting on a flush or not, is told to the
/// observer the node wires to `/metrics` (`agora_store_commit_wait_seconds`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_commit_is_told_to_the_commit_observer() {
    let waits = Arc::new(std::sync::Mutex::new(Vec::new()));
    let told = waits.clone();
    let store = Store::temporary()
        .unwrap()
        .observing_commits(Arc::new(move |waited| told.lock().unwrap().push(waited)));
    store.commit().await.unwrap();
    store.put(Collection::Sessions, b"s", &"v", None).await.unwrap();
    store.commit().await.unwrap();
    assert_eq!(waits.lock().unwrap().len(), 2);
    let unobserved = Store::temporary().unwrap();
    unobserved.commit().await.unwrap();
    assert_eq!(
        waits.lock().unwrap().len(),
        2,
        "another store's commits are its own"
    );
}

/// sled only: keyed entries are journaled with the claims, so their commit
/// flushes no tree; past the memory bound they go to the tree and still read
/// back. (That the journal brings them back after a restart is
/// `journal::tests` and `crash::signed_direct_results_survive_a_sigkill_under_load`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_entries_are_journaled_and_spill_past_the_memory_bound() {
    use super::backend::Backend;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state");
    let bounds = MemoryBounds {
        max_claims: 10,
        max_keyed_bytes: 2 * (64 + 3),
    };
    let backend = sled::SledBackend::open(&path, bounds).unwrap();
    let journal = path.with_extension("claims");
    let c = Collection::Negotiations;
    let later = Some(now_ms() + 60_000);
    let empty = std::fs::metadata(&journal).unwrap().len();
    backend.put_keyed(c, b"a", b"\"a\"", later).await.unwrap();
    backend.put_keyed(c, b"b", b"\"b\"", later).await.unwrap();
    assert!(
        !backend.has_unflushed_writes(),
        "a keyed entry in memory wrote a tree"
    );
    backend.commit().await.unwrap();
    // Two entry records (29-byte header, 3-byte value, CRC) past the header.
    assert_eq!(std::fs::metadata(&journal).unwrap().len(), empty + 2 * 36);
    backend.put_keyed(c, b"c", b"\"c\"", later).await.unwrap();
    assert!(
        backend.has_unflushed_writes(),
        "the spilled entry is the tree's to flush"
    );
    backend.commit().await.unwrap();
    for key in ["a", "b", "c"] {
        let entry = backend.get_keyed(c, key.as_bytes()).await.unwrap().unwrap();
        assert_eq!(entry.value, format!("{key:?}").into_bytes());
        assert_eq!(entry.expires_at_ms, later);
    }
}

/// sled only: claims are journaled beside the database, and past the memory
/// bound they spill to the tree and still admit a key once. (That the
/// journal brings them back after a restart is `journal::tests` and the
/// SIGKILL tests in `tests/e2e/crash.rs`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_are_journaled_and_spill_past_the_memory_bound() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state");
    let journal = path.with_extension("claims");
    let later = now_ms() + 60_000;
    let bounds = MemoryBounds {
        max_claims: 2,
        ..MemoryBounds::default()
    };
    let store = Store::open_bounded(&path, bounds).unwrap();
    let empty = std::fs::metadata(&journal).unwrap().len();
    for key in [&b"a"[..], b"b", b"c", b"d"] {
        assert!(store.claim_once(key, later).await.unwrap());
    }
    for key in [&b"a"[..], b"b", b"c", b"d"] {
        assert!(!store.claim_once(key, later).await.unwrap(), "{key:?}");
    }
    store.release_claim(b"d").await.unwrap();
    assert!(store.claim_once(b"d", later).await.unwrap());
    store.commit().await.unwrap();
    // Two claims in memory, journaled: two records past the header.
    assert_eq!(std::fs::metadata(&journal).unwrap().len(), empty + 2 * 29);
}

/// sled only: every kind of write leaves the next commit a flush to wait
/// for (a commit with nothing pending returns at once, so a write that were
/// not counted would be acknowledged before it is on disk).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sled_write_leaves_the_next_commit_a_flush_to_wait_for() {
    use super::backend::Backend;
    let dir = tempfile::tempdir().unwrap();
    let backend = sled::SledBackend::open(&dir.path().join("state"), MemoryBounds::default()).unwrap();
    let c = Collection::Conversations;
    let later = Some(now_ms() + 60_000);
    backend.put(c, b"seed", b"1", later).await.unwrap();
    backend.put(c, b"taken", b"1", later).await.unwrap();
    backend.put(c, b"expired", b"1", Some(1)).await.unwrap();
    backend.append_history("h", b"1", 10, 1000).await.unwrap();
    backend.commit().await.unwrap();
    for step in 0..8 {
        assert!(
            !backend.has_unflushed_writes(),
            "after the commit before step {step}"
        );
        match step {
            0 => backend.put(c, b"k", b"1", later).await.map(drop),
            1 => backend.insert_new(c, b"new", b"1", later).await.map(drop),
            2 => backend
                .compare_and_swap(c, b"seed", b"1", b"2", later)
                .await
                .map(drop),
            3 => backend.take(c, b"taken").await.map(drop),
            4 => backend.remove(c, b"k").await.map(drop),
            5 => backend.append_history("h", b"2", 10, 1000).await,
            6 => backend.remove_history("h").await,
            _ => backend.sweep().await.map(drop),
        }
        .unwrap();
        assert!(
            backend.has_unflushed_writes(),
            "step {step} left nothing to flush"
        );
        backend.commit().await.unwrap();
    }
}

/// sled only: a history written before the counters existed.
#[tokio::test]
async fn a_history_without_counters_is_counted_once_and_continued() {
    let backend = std::sync::Arc::new(sled::SledBackend::temporary().unwrap());
    let tree = backend.history_tree();
    for i in 0..3u64 {
        let mut key = sled::history_prefix("old");
        key.extend_from_slice(&i.to_be_bytes());
        tree.insert(key, serde_json::to_vec(&i).unwrap()).unwrap();
    }
    let store = Store::new(backend);
    store.append_history("old", &3u64, 4).await.unwrap();
    assert_eq!(whole::<u64>(&store, "old").await, vec![0, 1, 2, 3]);
    assert!(
        store
            .append_history("old", &4u64, 4)
            .await
            .unwrap_err()
            .is_quota()
    );
}

async fn a_unit_reads_its_own_writes_and_commits_them(store: Store) {
    let c = Collection::PluginKv;
    store.put(c, b"p\0gone", &"old", None).await.unwrap();
    store.put(c, b"p\0kept", &"kept", None).await.unwrap();
    let unit = store.unit();
    unit.put(c, b"p\0new", &"new", None).await.unwrap();
    unit.remove(c, b"p\0gone").await.unwrap();
    unit.append_entry("conv", "user", &serde_json::json!("hi"), 10)
        .await
        .unwrap();
    assert_eq!(
        unit.get::<String>(c, b"p\0new").await.unwrap().as_deref(),
        Some("new")
    );
    assert_eq!(unit.get::<String>(c, b"p\0gone").await.unwrap(), None);
    assert_eq!(
        unit.get::<String>(c, b"p\0kept").await.unwrap().as_deref(),
        Some("kept")
    );
    assert_eq!(
        unit.keys(c, b"p\0", 10).await.unwrap(),
        vec![b"p\0kept".to_vec(), b"p\0new".to_vec()]
    );
    assert_eq!(unit.keys(c, b"p\0", 1).await.unwrap(), vec![b"p\0kept".to_vec()]);
    unit.commit().await.unwrap();
    assert_eq!(
        store.get::<String>(c, b"p\0new").await.unwrap().as_deref(),
        Some("new")
    );
    assert_eq!(store.get::<String>(c, b"p\0gone").await.unwrap(), None);
    let history: Vec<serde_json::Value> = whole(&store, "conv").await;
    assert_eq!(history.len(), 1);
    assert_eq!(history[0]["body"], "hi");
}

async fn racing_claims_in_units_admit_exactly_one(store: Store) {
    let later = now_ms() + 60_000;
    let racers: Vec<_> = (0..8)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                let unit = store.unit();
                let claimed = unit.claim_once(b"sender\0id", later).await.unwrap();
                unit.put(Collection::Negotiations, b"state", &claimed, None)
                    .await
                    .unwrap();
                unit.commit().await.unwrap();
                claimed
            })
        })
        .collect();
    let mut winners = 0;
    for racer in racers {
        winners += usize::from(racer.await.unwrap());
    }
    assert_eq!(winners, 1);
    assert!(!store.claim_once(b"sender\0id", later).await.unwrap());
}
