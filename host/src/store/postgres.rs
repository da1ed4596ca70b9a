//! The shared backend for a fleet of nodes: one PostgreSQL database.
//!
//! **Client.** tokio-postgres with a deadpool pool, rather than sqlx: it is
//! small (no macros, no compile-time database, no second runtime layer), fully
//! async on the node's tokio, and gives `LISTEN`/`NOTIFY` on a plain
//! connection ([`bus`]), which sqlx wraps in its own listener type. Every
//! statement is prepared once per connection (deadpool's statement cache).
//!
//! **TLS** by the URL's `sslmode` (`disable`, `require`, `verify-ca`,
//! `verify-full`; without one, `verify-full` unless every host is loopback),
//! with rustls and the node's one client policy: [`tls`] says how each mode
//! verifies, and its one connector serves the pool and the bus alike.
//!
//! **Atomicity.** Every [`Backend`] method is one SQL statement (or, for the
//! sweep, one transaction per batch), so the fleet guarantees hold under
//! PostgreSQL's row locking: `insert_new` is an `INSERT … ON CONFLICT DO
//! UPDATE … WHERE` the existing row has expired; `take` is `DELETE …
//! RETURNING`; `compare_and_swap` is an `UPDATE … WHERE value = expected` (both
//! in canonical JSON, see `canonical`);
//! `append_history` upserts the history's counters with the quota checks in
//! the conflict clause's `WHERE` and inserts the entry from its `RETURNING`.
//! Expiry compares with the node's own clock ([`now_ms`]), passed in.
//!
//! **Durability.** Statements autocommit: a call that returned `Ok` has
//! committed, so [`Backend::commit`] has nothing to wait for. A request's
//! unit of work ([`super::UnitOfWork`]) is the exception, by design: its
//! writes wait, and go with one `COMMIT` before the reply ([`transaction`]),
//! so a request pays one WAL flush however many writes it made.
//!
//! **Outages.** The pool waits at most `timeout` for a connection, each
//! connection has `statement_timeout = timeout`, and every call is bounded by
//! [`DEADLINE_FACTOR`] × `timeout` in all. A connection-class failure (refused,
//! reset, timed out, SQLSTATE classes 08, 53, 57P, 40 and `57014`) is
//! [`StoreError::Unavailable`]; the pool drops dead connections and makes new
//! ones, so the node recovers by itself when the database returns. Any other
//! SQL error is a bug and is [`StoreError::Database`].

mod bus;
mod migrate;
mod plugin_set;
#[cfg(test)]
pub(super) mod tests;
mod tls;
mod transaction;

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime};
use tokio::sync::{Mutex, broadcast};
use tokio_postgres::Row;
use tokio_postgres::config::SslMode as WireSslMode;
use tokio_postgres::types::ToSql;

use super::backend::{Backend, FleetMessage, LISTED_VALUE_MAX_BYTES, ListedEntry, RawEntry};
use super::{Collection, HistoryPage, PageBuilder, Result, StoreError, now_ms};
use crate::config::{SslMode, StoreConfig};

/// Rows one sweep statement deletes at most, so it never holds many locks long.
const SWEEP_BATCH: usize = 1000;

/// How long fleet messages are kept for a listener that reconnects.
const FLEET_RETENTION_SECS: f64 = 60.0;

/// Messages a slow subscriber may fall behind before it loses the oldest.
const BUS_CAPACITY: usize = 1024;

/// A call's whole bound, in units of `timeout`: waiting for a connection, then the statement.
const DEADLINE_FACTOR: u32 = 3;

/// [`Backend::put`]: $1 collection, $2 key, $3 canonical value, $4 expiry.
const PUT: &str = "INSERT INTO entries (collection, key, value, expires_at_ms) VALUES ($1, $2, $3, $4)
     ON CONFLICT (collection, key) DO UPDATE SET value = EXCLUDED.value, expires_at_ms = EXCLUDED.expires_at_ms";

/// The counters' half of an append: $1 history id, $3 the entry's size, $4
/// and $5 the quota in entries and bytes; a row with the entry's sequence
/// number when the quota allows it, none when it refuses.
macro_rules! append_counters {
    () => {
        "WITH meta AS (
             INSERT INTO history_meta AS m (id, next, entries, bytes)
             SELECT $1::text, 1, 1, $3::bigint WHERE $3::bigint <= $5::bigint AND $4::bigint >= 1
             ON CONFLICT (id) DO UPDATE
                 SET next = m.next + 1, entries = m.entries + 1, bytes = m.bytes + EXCLUDED.bytes
                 WHERE m.entries < $4::bigint AND m.bytes + EXCLUDED.bytes <= $5::bigint
             RETURNING m.next - 1 AS seq
         )"
    };
}

/// [`Backend::append_history`] ($2 the entry): no row back when refused.
const APPEND: &str = concat!(
    append_counters!(),
    " INSERT INTO history (id, seq, entry, size)
     SELECT $1::text, seq, $2::bytea, $3::bigint::integer FROM meta
     RETURNING seq"
);

/// [`APPEND`] inside a transaction that a refusal must undo: refused, the
/// sequence number is NULL and the insert fails (SQLSTATE 23502), aborting
/// the transaction (see `transaction`).
const APPEND_REFUSING: &str = concat!(
    append_counters!(),
    " INSERT INTO history (id, seq, entry, size)
     VALUES ($1::text, (SELECT seq FROM meta), $2::bytea, $3::bigint::integer)"
);

/// [`Backend::remove`]: $1 collection, $2 key.
const REMOVE: &str = "DELETE FROM entries WHERE collection = $1 AND key = $2";

/// [`Backend::insert_new`]: as [`PUT`], only over an entry expired by $5
/// (now); a row back when it went in.
const INSERT_NEW: &str = "INSERT INTO entries (collection, key, value, expires_at_ms) VALUES ($1, $2, $3, $4)
     ON CONFLICT (collection, key) DO UPDATE
         SET value = EXCLUDED.value, expires_at_ms = EXCLUDED.expires_at_ms
         WHERE entries.expires_at_ms <= $5
     RETURNING 1";

pub struct PostgresBackend {
    pool: Pool,
    timeout: Duration,
    /// This node's id on the fleet bus, so its own messages are not echoed.
    origin: uuid::Uuid,
    fleet: broadcast::Sender<FleetMessage>,
    /// The fleet listener's task, ended when the backend is dropped.
    listener: tokio::task::JoinHandle<()>,
    /// Shared with the listener task (see [`bus::Listener::gate`]).
    #[cfg(test)]
    listener_gate: Arc<Mutex<()>>,
}

impl Drop for PostgresBackend {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

impl PostgresBackend {
    /// Build the pool (`store.postgres_pool_size` connections, each wait
    /// bounded by `store.postgres_timeout_ms`) with TLS as the URL's `sslmode`
    /// says (trusting `outbound_ca_file` too when `store.postgres_ca_file` is
    /// empty), apply the migrations and start the fleet listener.
    pub async fn connect(store: &StoreConfig, outbound_ca_file: &Path) -> Result<PostgresBackend> {
        let timeout = Duration::from_millis(store.postgres_timeout_ms);
        let url = store
            .postgres_url()
            .map_err(|e| StoreError::Database(e.to_string()))?;
        let mut config: tokio_postgres::Config = url
            .url
            .parse()
            .map_err(|e| StoreError::Database(format!("store.postgres_url: {}", error_chain(&e))))?;
        let mode = tls::mode(url.ssl_mode, &config);
        let connector = tls::connector(store, outbound_ca_file, mode)?;
        config
            .ssl_mode(match mode {
                SslMode::Disable => WireSslMode::Disable,
                SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => WireSslMode::Require,
            })
            .connect_timeout(timeout)
            .options(format!("-c statement_timeout={}", timeout.as_millis()))
            .application_name("agora-node");
        tracing::info!(sslmode = mode.as_str(), "connecting to the database");
        let manager = Manager::from_config(
            config.clone(),
            connector.clone(),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(store.postgres_pool_size)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(timeout))
            .create_timeout(Some(timeout))
            .recycle_timeout(Some(timeout))
            .build()
            .map_err(|e| StoreError::Database(format!("building the connection pool: {e}")))?;
        let watermark: i64 = {
            let mut client = pool.get().await.map_err(pool_error)?;
            migrate::migrate(&mut client).await?;
            client
                .query_one("SELECT coalesce(max(id), 0) FROM fleet_messages", &[])
                .await
                .map_err(db_error)?
                .get(0)
        };
        let origin = uuid::Uuid::new_v4();
        let fleet = broadcast::channel(BUS_CAPACITY).0;
        let listener_gate = Arc::new(Mutex::new(()));
        let mut listen = config;
        listen.application_name(format!("agora-fleet-{origin}"));
        let listener = bus::Listener {
            config: listen,
            tls: connector,
            origin,
            sender: fleet.clone(),
            gate: listener_gate.clone(),
        };
        Ok(PostgresBackend {
            pool,
            timeout,
            origin,
            fleet,
            listener: tokio::spawn(listener.run(watermark)),
            #[cfg(test)]
            listener_gate,
        })
    }

    /// Keep the fleet listener from reconnecting while the guard lives (tests).
    #[cfg(test)]
    pub(super) async fn hold_listener(&self) -> tokio::sync::OwnedMutexGuard<()> {
        self.listener_gate.clone().lock_owned().await
    }

    /// The `application_name` of this node's listener connection (tests cut it).
    #[cfg(test)]
    pub(super) fn listener_name(&self) -> String {
        format!("agora-fleet-{}", self.origin)
    }

    /// `work`, or `Unavailable` once the call's deadline passes.
    async fn bounded<T>(&self, work: impl Future<Output = Result<T>>) -> Result<T> {
        bounded(self.timeout, work).await
    }

    /// One statement through the pool (prepared once per connection).
    async fn query(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>> {
        self.bounded(async {
            let client = self.pool.get().await.map_err(pool_error)?;
            let statement = client.prepare_cached(sql).await.map_err(db_error)?;
            client.query(&statement, params).await.map_err(db_error)
        })
        .await
    }

    async fn execute(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64> {
        self.bounded(async {
            let client = self.pool.get().await.map_err(pool_error)?;
            let statement = client.prepare_cached(sql).await.map_err(db_error)?;
            client.execute(&statement, params).await.map_err(db_error)
        })
        .await
    }

    /// One sweep batch in one transaction: expired entries, and the histories
    /// they owned; how many entries went.
    async fn sweep_batch(&self, now: i64, owners: &[&str]) -> Result<usize> {
        self.bounded(async {
            let mut client = self.pool.get().await.map_err(pool_error)?;
            let transaction = client.transaction().await.map_err(db_error)?;
            // SKIP LOCKED: nodes sweeping at once take different rows, and a
            // row a request holds now is left for the next sweep.
            let gone = transaction
                .query(
                    "DELETE FROM entries e
                     USING (SELECT collection, key FROM entries WHERE expires_at_ms <= $1
                            LIMIT $2 FOR UPDATE SKIP LOCKED) old
                     WHERE e.collection = old.collection AND e.key = old.key AND e.expires_at_ms <= $1
                     RETURNING e.collection, e.key",
                    &[&now, &(SWEEP_BATCH as i64)],
                )
                .await
                .map_err(db_error)?;
            let ended: Vec<String> = gone
                .iter()
                .filter(|row| owners.contains(&row.get::<_, &str>(0)))
                .map(|row| String::from_utf8_lossy(row.get::<_, &[u8]>(1)).into_owned())
                .collect();
            if !ended.is_empty() {
                transaction
                    .execute(
                        "WITH meta AS (DELETE FROM history_meta WHERE id = ANY($1))
                         DELETE FROM history WHERE id = ANY($1)",
                        &[&ended],
                    )
                    .await
                    .map_err(db_error)?;
            }
            transaction.commit().await.map_err(db_error)?;
            Ok(gone.len())
        })
        .await
    }

    /// Which limit refused an append (read after the refusal, for the message only).
    async fn refusal(&self, id: &str, max_entries: u64, max_bytes: u64) -> Result<StoreError> {
        let counters = self.query(HISTORY_COUNT, &[&id]).await?;
        Ok(refusal(&counters, 0, id, max_entries, max_bytes))
    }
}

/// [`Backend::get`]: $1 collection, $2 key, $3 now.
const GET: &str = "SELECT value, expires_at_ms FROM entries
     WHERE collection = $1 AND key = $2 AND (expires_at_ms IS NULL OR expires_at_ms > $3)";

/// [`Backend::keys`]' and [`Backend::entries`]' statement and its parameters.
struct KeysQuery {
    table: &'static str,
    prefix: Vec<u8>,
    /// The first key past the prefix, when there is one.
    end: Option<Vec<u8>>,
    limit: i64,
    /// Each key's value (up to [`LISTED_VALUE_MAX_BYTES`]) and expiry too.
    with_entries: bool,
}

impl KeysQuery {
    fn new(collection: Collection, prefix: &[u8], limit: usize) -> KeysQuery {
        KeysQuery {
            table: collection.table_name(),
            prefix: prefix.to_vec(),
            end: prefix_end(prefix),
            limit: cap(limit),
            with_entries: false,
        }
    }

    fn with_entries(collection: Collection, prefix: &[u8], limit: usize) -> KeysQuery {
        KeysQuery {
            with_entries: true,
            ..KeysQuery::new(collection, prefix, limit)
        }
    }

    fn sql(&self) -> &'static str {
        // The value's bound is `LISTED_VALUE_MAX_BYTES`, spelled out: a
        // statement is a constant so that it is prepared once per connection.
        const _: () = assert!(LISTED_VALUE_MAX_BYTES == 16384);
        match (self.end.is_some(), self.with_entries) {
            (true, false) => {
                "SELECT key FROM entries WHERE collection = $1 AND key >= $2 AND key < $3 ORDER BY key LIMIT $4"
            }
            (false, false) => {
                "SELECT key FROM entries WHERE collection = $1 AND key >= $2 ORDER BY key LIMIT $3"
            }
            (true, true) => {
                "SELECT key, CASE WHEN octet_length(value) <= 16384 THEN value END, expires_at_ms FROM entries
                 WHERE collection = $1 AND key >= $2 AND key < $3 ORDER BY key LIMIT $4"
            }
            (false, true) => {
                "SELECT key, CASE WHEN octet_length(value) <= 16384 THEN value END, expires_at_ms FROM entries
                 WHERE collection = $1 AND key >= $2 ORDER BY key LIMIT $3"
            }
        }
    }

    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        match &self.end {
            Some(end) => vec![&self.table, &self.prefix, end, &self.limit],
            None => vec![&self.table, &self.prefix, &self.limit],
        }
    }

    /// A row of the statement made by [`KeysQuery::with_entries`].
    fn listed(row: &Row) -> ListedEntry {
        let value: Option<Vec<u8>> = row.get(1);
        ListedEntry {
            key: row.get(0),
            entry: value.map(|value| RawEntry {
                value,
                expires_at_ms: row.get::<_, Option<i64>>(2).map(|at| at.max(0) as u64),
            }),
        }
    }
}

/// The entries a history holds, for [`refusal`].
const HISTORY_COUNT: &str = "SELECT entries FROM history_meta WHERE id = $1";

/// Which limit refused an append, from what [`HISTORY_COUNT`] read and the
/// `uncommitted` entries appended before it (in a transaction since rolled back).
fn refusal(counters: &[Row], uncommitted: usize, id: &str, max_entries: u64, max_bytes: u64) -> StoreError {
    let stored = counters.first().map_or(0, |row| row.get::<_, i64>(0));
    let entries = u64::try_from(stored)
        .unwrap_or(0)
        .saturating_add(uncommitted as u64);
    if entries >= max_entries {
        StoreError::history_full_entries(id, max_entries)
    } else {
        StoreError::history_full_bytes(id, max_bytes)
    }
}

/// `work`, or `Unavailable` once [`DEADLINE_FACTOR`] × `timeout` has passed.
async fn bounded<T>(timeout: Duration, work: impl Future<Output = Result<T>>) -> Result<T> {
    let deadline = timeout * DEADLINE_FACTOR;
    tokio::time::timeout(deadline, work).await.unwrap_or_else(|_| {
        Err(StoreError::Unavailable(format!(
            "the database did not answer within {} ms",
            deadline.as_millis()
        )))
    })
}

#[async_trait]
impl Backend for PostgresBackend {
    fn name(&self) -> &'static str {
        "postgres"
    }

    async fn get(&self, collection: Collection, key: &[u8]) -> Result<Option<RawEntry>> {
        let rows = self.query(GET, &[&collection.table_name(), &key, &now()]).await?;
        Ok(rows.first().map(raw_entry))
    }

    async fn is_expired(&self, collection: Collection, key: &[u8]) -> Result<bool> {
        let rows = self
            .query(
                "SELECT 1 FROM entries WHERE collection = $1 AND key = $2 AND expires_at_ms <= $3",
                &[&collection.table_name(), &key, &now()],
            )
            .await?;
        Ok(!rows.is_empty())
    }

    async fn put(
        &self,
        collection: Collection,
        key: &[u8],
        value: &[u8],
        expires_at_ms: Option<u64>,
    ) -> Result<()> {
        self.execute(
            PUT,
            &[
                &collection.table_name(),
                &key,
                &canonical(value)?,
                &expires_at_ms.map(ms),
            ],
        )
        .await?;
        Ok(())
    }

    async fn remove(&self, collection: Collection, key: &[u8]) -> Result<bool> {
        let removed = self.execute(REMOVE, &[&collection.table_name(), &key]).await?;
        Ok(removed > 0)
    }

    async fn take(&self, collection: Collection, key: &[u8]) -> Result<Option<RawEntry>> {
        let now = now();
        let rows = self
            .query(
                "DELETE FROM entries WHERE collection = $1 AND key = $2 RETURNING value, expires_at_ms",
                &[&collection.table_name(), &key],
            )
            .await?;
        Ok(rows
            .first()
            .map(raw_entry)
            .filter(|entry| entry.expires_at_ms.is_none_or(|at| ms(at) > now)))
    }

    async fn insert_new(
        &self,
        collection: Collection,
        key: &[u8],
        value: &[u8],
        expires_at_ms: Option<u64>,
    ) -> Result<bool> {
        let inserted = self
            .query(
                INSERT_NEW,
                &[
                    &collection.table_name(),
                    &key,
                    &canonical(value)?,
                    &expires_at_ms.map(ms),
                    &now(),
                ],
            )
            .await?;
        Ok(!inserted.is_empty())
    }

    async fn compare_and_swap(
        &self,
        collection: Collection,
        key: &[u8],
        expected: &[u8],
        new: &[u8],
        expires_at_ms: Option<u64>,
    ) -> Result<bool> {
        let swapped = self
            .execute(
                "UPDATE entries SET value = $4, expires_at_ms = $5
                 WHERE collection = $1 AND key = $2 AND value = $3
                   AND (expires_at_ms IS NULL OR expires_at_ms > $6)",
                &[
                    &collection.table_name(),
                    &key,
                    &canonical(expected)?,
                    &canonical(new)?,
                    &expires_at_ms.map(ms),
                    &now(),
                ],
            )
            .await?;
        Ok(swapped > 0)
    }

    /// One statement: the counters' upsert takes the history's row lock and
    /// checks the quota (a first append is checked in its `SELECT`), and the
    /// entry goes in at the sequence number it returns.
    async fn append_history(&self, id: &str, entry: &[u8], max_entries: u64, max_bytes: u64) -> Result<()> {
        let appended = self
            .query(
                APPEND,
                &[
                    &id,
                    &entry,
                    &(entry.len() as i64),
                    &ms(max_entries),
                    &ms(max_bytes),
                ],
            )
            .await?;
        if appended.is_empty() {
            return Err(self.refusal(id, max_entries, max_bytes).await?);
        }
        Ok(())
    }

    async fn history_page(
        &self,
        id: &str,
        after: Option<u64>,
        max_entries: usize,
        max_bytes: usize,
    ) -> Result<HistoryPage<Vec<u8>>> {
        let after = match after.map(i64::try_from) {
            None => -1,
            Some(Ok(after)) => after,
            Some(Err(_)) => return Ok(HistoryPage::empty()),
        };
        // The page and the entry after it (so `next_after` is known): row n
        // comes back when it is among the first two or the rows before it fit.
        let rows = self
            .query(
                "SELECT seq, entry FROM (
                     SELECT seq, entry, size,
                            sum(size) OVER (ORDER BY seq) AS running,
                            row_number() OVER (ORDER BY seq) AS n
                     FROM history WHERE id = $1 AND seq > $2
                 ) page
                 WHERE n <= $3 AND (n <= 2 OR running - size <= $4)
                 ORDER BY seq LIMIT $3",
                &[
                    &id,
                    &after,
                    &cap(max_entries.max(1)).saturating_add(1),
                    &cap(max_bytes),
                ],
            )
            .await?;
        let mut page = PageBuilder::new(max_entries, max_bytes);
        for row in rows {
            if !page.push(row.get::<_, i64>(0) as u64, row.get(1)) {
                return Ok(page.finish(true));
            }
        }
        Ok(page.finish(false))
    }

    async fn history_tail(&self, id: &str, max_entries: usize, max_bytes: usize) -> Result<Vec<Vec<u8>>> {
        let rows = self
            .query(
                "SELECT seq, entry FROM (
                     SELECT seq, entry,
                            sum(size) OVER (ORDER BY seq DESC) AS running,
                            row_number() OVER (ORDER BY seq DESC) AS n
                     FROM history WHERE id = $1
                 ) tail
                 WHERE n <= $2 AND (n = 1 OR running <= $3)
                 ORDER BY seq DESC LIMIT $2",
                &[&id, &cap(max_entries.max(1)), &cap(max_bytes)],
            )
            .await?;
        let mut page = PageBuilder::new(max_entries, max_bytes);
        for row in rows {
            if !page.push(row.get::<_, i64>(0) as u64, row.get(1)) {
                break;
            }
        }
        let mut entries = page.finish(false).entries;
        entries.reverse();
        Ok(entries)
    }

    async fn remove_history(&self, id: &str) -> Result<()> {
        self.execute(
            "WITH meta AS (DELETE FROM history_meta WHERE id = $1) DELETE FROM history WHERE id = $1",
            &[&id],
        )
        .await?;
        Ok(())
    }

    async fn keys(&self, collection: Collection, prefix: &[u8], limit: usize) -> Result<Vec<Vec<u8>>> {
        let keys = KeysQuery::new(collection, prefix, limit);
        let rows = self.query(keys.sql(), &keys.params()).await?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }

    async fn entries(&self, collection: Collection, prefix: &[u8], limit: usize) -> Result<Vec<ListedEntry>> {
        let keys = KeysQuery::with_entries(collection, prefix, limit);
        let rows = self.query(keys.sql(), &keys.params()).await?;
        Ok(rows.iter().map(KeysQuery::listed).collect())
    }

    async fn sweep(&self) -> Result<usize> {
        let now = now();
        let owners: Vec<&str> = Collection::ALL
            .into_iter()
            .filter(|c| c.owns_history())
            .map(Collection::table_name)
            .collect();
        let mut removed = 0;
        loop {
            let batch = self.sweep_batch(now, &owners).await?;
            removed += batch;
            if batch < SWEEP_BATCH {
                break;
            }
        }
        self.execute(
            "DELETE FROM fleet_messages WHERE created_at < now() - make_interval(secs => $1)",
            &[&FLEET_RETENTION_SECS],
        )
        .await?;
        Ok(removed)
    }

    async fn commit(&self) -> Result<()> {
        Ok(())
    }

    fn transaction(&self) -> Option<Box<dyn super::backend::Transaction>> {
        Some(Box::new(transaction::PgTransaction::new(
            self.pool.clone(),
            self.timeout,
        )))
    }

    async fn ping(&self) -> Result<()> {
        self.query("SELECT 1", &[]).await.map(drop)
    }

    async fn publish(&self, topic: &str, payload: &[u8]) -> Result<()> {
        self.query(
            "WITH message AS (
                 INSERT INTO fleet_messages (origin, topic, payload) VALUES ($1::text::uuid, $2, $3) RETURNING id
             )
             SELECT pg_notify($4, id::text) FROM message",
            &[&self.origin.to_string(), &topic, &payload, &bus::CHANNEL],
        )
        .await
        .map(drop)
    }

    fn subscribe(&self) -> broadcast::Receiver<FleetMessage> {
        self.fleet.subscribe()
    }

    fn plugin_set(&self) -> Option<&dyn super::plugin_set::PluginSet> {
        Some(self)
    }
}

/// A connection-class failure is an outage (503, recovers); anything else the
/// database refused is a bug.
fn db_error(error: tokio_postgres::Error) -> StoreError {
    let Some(code) = error.code().map(|code| code.code().to_owned()) else {
        // No SQLSTATE: the socket or its TLS failed, closed or timed out.
        return StoreError::Unavailable(
            tls::failure(&error)
                .unwrap_or_else(|| format!("the database connection failed: {}", error_chain(&error))),
        );
    };
    let detail = error
        .as_db_error()
        .map_or_else(|| error.to_string(), |db| db.message().to_owned());
    let outage = ["08", "53", "57P", "40"]
        .iter()
        .any(|class| code.starts_with(class))
        || code == "57014";
    if outage {
        StoreError::Unavailable(format!("the database refused ({code}): {detail}"))
    } else {
        StoreError::Database(format!("{code}: {detail}"))
    }
}

/// An error and its causes: tokio-postgres's own text leaves the cause out
/// ("invalid connection string", "error connecting to server").
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(cause) = next {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        next = cause.source();
    }
    text
}

fn pool_error(error: PoolError) -> StoreError {
    match error {
        PoolError::Backend(error) => db_error(error),
        other => StoreError::Unavailable(format!("no database connection: {other}")),
    }
}

fn raw_entry(row: &Row) -> RawEntry {
    RawEntry {
        value: row.get(0),
        expires_at_ms: row.get::<_, Option<i64>>(1).map(|at| at.max(0) as u64),
    }
}

/// The one spelling of a JSON value: keys sorted at every level, no spaces.
/// Values equal as `serde_json::Value` (the comparison sled makes) get equal
/// bytes, so `compare_and_swap` is a byte comparison in SQL, and any JSON
/// string (U+0000 included, which jsonb refuses) is stored as it is.
fn canonical(value: &[u8]) -> Result<Vec<u8>> {
    let value: serde_json::Value = serde_json::from_slice(value)?;
    Ok(serde_json::to_vec(&sorted(value))?)
}

/// Sorted explicitly: serde_json keeps insertion order when any crate in the
/// build turns on its `preserve_order` feature.
fn sorted(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut members: Vec<(String, Value)> = map.into_iter().collect();
            members.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(
                members
                    .into_iter()
                    .map(|(key, value)| (key, sorted(value)))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}

/// Milliseconds (or any count) as PostgreSQL's bigint; past its range is "never".
fn ms(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn cap(value: usize) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn now() -> i64 {
    ms(now_ms())
}

/// The first key past every key starting with `prefix`, if there is one.
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}
