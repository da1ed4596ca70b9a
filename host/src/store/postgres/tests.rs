//! PostgreSQL only: migrations under concurrent starts, the fleet bus, and an
//! outage. The behaviour both backends share is in `store::tests`, run on
//! each; these need a real server (`agora_test_postgres`).

use std::sync::Arc;
use std::time::Duration;

use agora_test_postgres::Postgres;
use tokio::sync::broadcast;
use tokio_postgres::{Client, NoTls};

use super::{PostgresBackend, migrate};
use crate::store::backend::{Backend, FleetMessage};
use crate::store::{Collection, Store};

/// Long enough never to fire on a loaded test machine; it only turns a hang into a failure.
const HANG: Duration = Duration::from_secs(30);

/// The backends' `timeout` where no outage is tested: roomy for a loaded machine.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) async fn fresh_database() -> String {
    tokio::task::spawn_blocking(|| Postgres::shared().create_database())
        .await
        .expect("creating a test database")
}

pub(crate) async fn backend(url: &str, timeout: Duration) -> PostgresBackend {
    let mut store = crate::config::Config::defaults().store;
    store.postgres_url = url.to_string();
    store.postgres_pool_size = 16;
    store.postgres_timeout_ms = u64::try_from(timeout.as_millis()).expect("a test timeout");
    PostgresBackend::connect(&store, std::path::Path::new(""))
        .await
        .expect("connecting to the test database")
}

/// Two nodes' backends on one fresh database, and its URL.
async fn two_nodes() -> (String, PostgresBackend, PostgresBackend) {
    let url = fresh_database().await;
    let (a, b) = (backend(&url, TIMEOUT).await, backend(&url, TIMEOUT).await);
    (url, a, b)
}

async fn raw_client(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.expect("raw connection");
    tokio::spawn(connection);
    client
}

async fn next_message(receiver: &mut broadcast::Receiver<FleetMessage>) -> FleetMessage {
    tokio::time::timeout(HANG, receiver.recv())
        .await
        .expect("a fleet message within the hang guard")
        .expect("the bus is open")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_apply_once_when_four_nodes_start_at_once_and_again() {
    let url = fresh_database().await;
    let starters: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move {
                let mut client = raw_client(&url).await;
                migrate::migrate(&mut client).await.expect("migrating")
            })
        })
        .collect();
    let mut applied = 0;
    for starter in starters {
        applied += starter.await.unwrap();
    }
    assert_eq!(applied, migrate::MIGRATIONS.len());
    // A node starting later applies nothing; neither does a whole backend.
    assert_eq!(migrate::migrate(&mut raw_client(&url).await).await.unwrap(), 0);
    backend(&url, TIMEOUT).await;
    let rows = raw_client(&url)
        .await
        .query(
            "SELECT version, count(*) FROM schema_migrations GROUP BY version ORDER BY version",
            &[],
        )
        .await
        .unwrap();
    let counts: Vec<(i32, i64)> = rows.iter().map(|row| (row.get(0), row.get(1))).collect();
    let expected: Vec<(i32, i64)> = migrate::MIGRATIONS
        .iter()
        .map(|(version, _)| (*version, 1))
        .collect();
    assert_eq!(counts, expected);
}

/// Two nodes' pools racing on one database: the shared suite races tasks of
/// one backend; this is the fleet's case.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_backends_racing_for_one_key_admit_exactly_one_each_round() {
    let (_, a, b) = two_nodes().await;
    let nodes = [Store::new(Arc::new(a)), Store::new(Arc::new(b))];
    let later = Some(crate::store::now_ms() + 60_000);
    for round in 0..50u32 {
        let key = format!("envelope-{round}");
        let (a, b) = tokio::join!(
            nodes[0].insert_new(Collection::Replay, key.as_bytes(), &0, later),
            nodes[1].insert_new(Collection::Replay, key.as_bytes(), &1, later),
        );
        assert_eq!(
            u8::from(a.unwrap()) + u8::from(b.unwrap()),
            1,
            "insert round {round}"
        );
        let (a, b) = tokio::join!(
            nodes[0].take::<u32>(Collection::Replay, key.as_bytes()),
            nodes[1].take::<u32>(Collection::Replay, key.as_bytes()),
        );
        let taken: Vec<u32> = a.unwrap().into_iter().chain(b.unwrap()).collect();
        assert_eq!(taken.len(), 1, "take round {round}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_message_reaches_the_other_node_whole_and_is_not_echoed() {
    let (_, a, b) = two_nodes().await;
    let (mut to_a, mut to_b) = (a.subscribe(), b.subscribe());
    // Past NOTIFY's 8000-byte payload limit, and not valid UTF-8.
    let big: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    a.publish("big", &big).await.unwrap();
    let got = next_message(&mut to_b).await;
    assert_eq!(got.topic, "big");
    assert_eq!(&got.payload[..], &big[..]);
    // A's own message came first in id order; A must see B's reply as its first.
    b.publish("reply", b"r").await.unwrap();
    let got = next_message(&mut to_a).await;
    assert_eq!((got.topic.as_str(), &got.payload[..]), ("reply", &b"r"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_sent_while_the_listener_was_cut_off_arrives_after_it_reconnects() {
    let (url, a, b) = two_nodes().await;
    let mut to_a = a.subscribe();
    let admin = raw_client(&url).await;
    let held = a.hold_listener().await;
    admin
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
            &[&a.listener_name()],
        )
        .await
        .unwrap();
    // Published only once the server has no listener of A's left.
    tokio::time::timeout(HANG, async {
        while !admin
            .query(
                "SELECT 1 FROM pg_stat_activity WHERE application_name = $1",
                &[&a.listener_name()],
            )
            .await
            .unwrap()
            .is_empty()
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("A's listener connection ends");
    b.publish("missed", b"while away").await.unwrap();
    drop(held);
    let got = next_message(&mut to_a).await;
    assert_eq!(
        (got.topic.as_str(), &got.payload[..]),
        ("missed", &b"while away"[..])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_database_is_unavailable_without_a_hang_and_the_same_backend_recovers() {
    let cluster = tokio::task::spawn_blocking(Postgres::start).await.unwrap();
    let url = tokio::task::block_in_place(|| cluster.create_database());
    let store = Store::new(Arc::new(backend(&url, Duration::from_millis(500)).await));
    store
        .put(Collection::Meta, b"kept", &"acknowledged", None)
        .await
        .unwrap();
    store.commit().await.unwrap();

    tokio::task::block_in_place(|| cluster.stop());
    let read = tokio::time::timeout(HANG, store.get::<String>(Collection::Meta, b"kept"))
        .await
        .expect("a read fails rather than hangs");
    assert!(read.as_ref().is_err_and(|e| e.is_unavailable()), "{read:?}");
    let write = tokio::time::timeout(HANG, store.put(Collection::Meta, b"new", &1, None))
        .await
        .expect("a write fails rather than hangs");
    assert!(write.as_ref().is_err_and(|e| e.is_unavailable()), "{write:?}");
    assert!(store.ping().await.is_err_and(|e| e.is_unavailable()));

    tokio::task::block_in_place(|| cluster.restart());
    store.ping().await.unwrap();
    assert_eq!(
        store
            .get::<String>(Collection::Meta, b"kept")
            .await
            .unwrap()
            .as_deref(),
        Some("acknowledged")
    );
    store.put(Collection::Meta, b"new", &2, None).await.unwrap();
    assert_eq!(store.get::<i32>(Collection::Meta, b"new").await.unwrap(), Some(2));
}

/// Whether a statement of the database now waits for a lock.
async fn someone_waits_for_a_lock(client: &Client) -> bool {
    let row = client
        .query_one("SELECT count(*) FROM pg_locks WHERE NOT granted", &[])
        .await
        .expect("reading pg_locks");
    row.get::<_, i64>(0) > 0
}

/// Until another node's claim of the same key waits on the unit's claim.
async fn until_a_claim_waits(client: &Client) {
    tokio::time::timeout(HANG, async {
        while !someone_waits_for_a_lock(client).await {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the other node's claim to wait for the unit's");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_in_a_unit_holds_until_its_commit_or_its_rollback() {
    let (url, a, b) = two_nodes().await;
    let (a, b) = (Store::new(Arc::new(a)), Store::new(Arc::new(b)));
    let watcher = raw_client(&url).await;
    let later = crate::store::now_ms() + 60_000;

    // Committed: the other node's claim, made meanwhile, finds it.
    let unit = a.unit();
    assert!(unit.claim_once(b"committed", later).await.unwrap());
    let other = tokio::spawn({
        let b = b.clone();
        async move { b.claim_once(b"committed", later).await.unwrap() }
    });
    until_a_claim_waits(&watcher).await;
    unit.commit().await.unwrap();
    assert!(!tokio::time::timeout(HANG, other).await.unwrap().unwrap());

    // Dropped without a commit: rolled back, so the other node's claim wins.
    let unit = a.unit();
    assert!(unit.claim_once(b"dropped", later).await.unwrap());
    let other = tokio::spawn({
        let b = b.clone();
        async move { b.claim_once(b"dropped", later).await.unwrap() }
    });
    until_a_claim_waits(&watcher).await;
    drop(unit);
    assert!(tokio::time::timeout(HANG, other).await.unwrap().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unit_whose_append_its_quota_refuses_writes_nothing() {
    let url = fresh_database().await;
    let store = Store::new(Arc::new(backend(&url, TIMEOUT).await));
    let later = crate::store::now_ms() + 60_000;
    let unit = store.unit();
    assert!(unit.claim_once(b"claim", later).await.unwrap());
    unit.put(Collection::Conversations, b"conv", &"record", None)
        .await
        .unwrap();
    unit.append_entry("conv", "user", &serde_json::json!("one"), 1)
        .await
        .unwrap();
    unit.append_entry("conv", "agent", &serde_json::json!("two"), 1)
        .await
        .unwrap();
    let refused = unit.commit().await.unwrap_err();
    assert!(refused.is_quota(), "{refused}");
    assert!(refused.to_string().contains("full (1 entries)"), "{refused}");
    assert_eq!(
        store
            .get::<String>(Collection::Conversations, b"conv")
            .await
            .unwrap(),
        None
    );
    assert!(
        store
            .history_tail::<serde_json::Value>("conv", 10, 1 << 20)
            .await
            .unwrap()
            .is_empty()
    );
    // The claim went with the rest: the key is free again.
    assert!(store.claim_once(b"claim", later).await.unwrap());
    // The pool's connections are all usable afterwards (none left mid-transaction).
    for _ in 0..20 {
        store.put(Collection::Meta, b"after", &1, None).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_in_a_unit_carries_its_values_until_the_request_may_wait() {
    let (_url, a, b) = two_nodes().await;
    let (a, b) = (Store::new(Arc::new(a)), Store::new(Arc::new(b)));
    let large = "x".repeat(crate::store::backend::LISTED_VALUE_MAX_BYTES + 1);
    let past = crate::store::now_ms() - 1;
    b.put(Collection::PluginKv, b"kv/a", &1, None).await.unwrap();
    b.put(Collection::PluginKv, b"kv/b", &large, None).await.unwrap();
    b.put(Collection::PluginKv, b"kv/c", &3, Some(past))
        .await
        .unwrap();

    let unit = a.unit();
    let listed = unit.keys(Collection::PluginKv, b"kv/", 64).await.unwrap();
    assert!(
        listed.starts_with(&[b"kv/a".to_vec(), b"kv/b".to_vec()]),
        "{listed:?}"
    );
    // Another node changes both after the listing.
    b.put(Collection::PluginKv, b"kv/a", &2, None).await.unwrap();
    b.put(Collection::PluginKv, b"kv/b", &"changed", None)
        .await
        .unwrap();

    // What the listing read, as a read made then would have: the small value
    // as listed, the one too large to carry read now, the expired one absent.
    assert_eq!(
        unit.get::<u32>(Collection::PluginKv, b"kv/a").await.unwrap(),
        Some(1)
    );
    assert_eq!(
        unit.get::<String>(Collection::PluginKv, b"kv/b")
            .await
            .unwrap()
            .as_deref(),
        Some("changed")
    );
    assert_eq!(
        unit.get::<u32>(Collection::PluginKv, b"kv/c").await.unwrap(),
        None
    );

    // The unit's own write wins over the listing.
    unit.put(Collection::PluginKv, b"kv/a", &7, None).await.unwrap();
    assert_eq!(
        unit.get::<u32>(Collection::PluginKv, b"kv/a").await.unwrap(),
        Some(7)
    );
    unit.commit().await.unwrap();

    // Before the request may wait, what was listed is forgotten: read afresh.
    unit.keys(Collection::PluginKv, b"kv/", 64).await.unwrap();
    b.put(Collection::PluginKv, b"kv/a", &8, None).await.unwrap();
    assert_eq!(
        unit.get::<u32>(Collection::PluginKv, b"kv/a").await.unwrap(),
        Some(7)
    );
    unit.commit_pending().await.unwrap();
    assert_eq!(
        unit.get::<u32>(Collection::PluginKv, b"kv/a").await.unwrap(),
        Some(8)
    );
}
