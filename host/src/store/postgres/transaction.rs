//! One request's writes in one PostgreSQL transaction ([`Transaction`]).
//!
//! **Why.** An autocommitted statement is a commit, and a commit waits for its
//! WAL flush: an Agora start wrote four times (its record, two history entries,
//! the plugin's key-value data), a signed REQUEST three (its replay claim and
//! two states), so the fleet paid several flushes and as many round trips for
//! what one node on sled flushes once. Here a request's writes go in one
//! transaction: one commit, one flush.
//!
//! **Round trips.** A claim begins the transaction in its own round trip
//! (`BEGIN` and the claim pipelined). The commit sends `BEGIN` (when no claim
//! did), every queued write and `COMMIT` pipelined: one round trip, whatever
//! the number of writes. A refused history append must undo the whole
//! transaction, so in here it raises an error when the quota refuses it (its
//! sequence number is then NULL, which `history.seq` refuses: SQLSTATE
//! 23502); the statements pipelined after it fail in the aborted transaction
//! and its `COMMIT` rolls back. The statements are prepared once per
//! connection, as the backend's own.
//!
//! **Holding.** Between a claim and the commit the transaction holds its
//! connection and the claim's row: a node claiming the same key meanwhile
//! waits for the commit (then finds the claim) or the rollback (then takes
//! it), so a key is still claimed once by the fleet. Writes without an
//! answer hold nothing until the commit. A transaction dropped before its
//! commit, or cut by its deadline, is rolled back on a task of its own before
//! its connection returns to the pool; a connection that cannot roll back is
//! closed rather than returned.

use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Object, Pool};
use futures::future::{BoxFuture, FutureExt, join_all};
use tokio_postgres::types::ToSql;

use super::{
    APPEND_REFUSING, GET, HISTORY_COUNT, INSERT_NEW, KeysQuery, PUT, REMOVE, bounded, canonical, db_error,
    ms, now, pool_error, raw_entry, refusal,
};
use crate::store::backend::{ListedEntry, RawEntry, Transaction, Write};
use crate::store::{Collection, Result, StoreError};

/// SQLSTATE `not_null_violation`: how [`APPEND_REFUSING`] says the quota refused.
const REFUSED_APPEND: &str = "23502";

pub(super) struct PgTransaction {
    pool: Pool,
    timeout: Duration,
    /// The connection of a transaction a claim began.
    open: Option<Open>,
    /// A claim failed inside a begun transaction, which the database then
    /// aborted: the commit must fail too rather than commit the rest alone.
    lost: bool,
}

impl PgTransaction {
    pub(super) fn new(pool: Pool, timeout: Duration) -> PgTransaction {
        PgTransaction {
            pool,
            timeout,
            open: None,
            lost: false,
        }
    }

    /// One read on the open transaction's connection; a failure aborted the
    /// transaction, so the commit will fail too.
    async fn read(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<tokio_postgres::Row>> {
        let Some(open) = &self.open else {
            return Err(StoreError::Database(
                "a read in a transaction that is not open".into(),
            ));
        };
        let rows = bounded(self.timeout, async {
            let client = open.client();
            let statement = client.prepare_cached(sql).await.map_err(db_error)?;
            client.query(&statement, params).await.map_err(db_error)
        })
        .await;
        self.lost |= rows.is_err();
        rows
    }
}

/// A pooled connection that may be inside a transaction: returned to the pool
/// by [`Open::release`] once the transaction ended, rolled back when dropped
/// before that.
struct Open(Option<Object>);

impl Open {
    async fn take_from(pool: &Pool) -> Result<Open> {
        Ok(Open(Some(pool.get().await.map_err(pool_error)?)))
    }

    fn client(&self) -> &Object {
        self.0.as_ref().expect("an open connection until released")
    }

    /// The transaction ended: the connection goes back to the pool as it is.
    fn release(mut self) {
        drop(self.0.take());
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        let Some(client) = self.0.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            drop(Object::take(client));
            return;
        };
        runtime.spawn(async move {
            let rolled_back =
                tokio::time::timeout(Duration::from_secs(5), client.batch_execute("ROLLBACK")).await;
            if !matches!(rolled_back, Ok(Ok(()))) {
                drop(Object::take(client));
            }
        });
    }
}

/// A queued write's statement parameters, owned while its statement runs.
enum Params {
    Entry {
        table: &'static str,
        key: Vec<u8>,
        value: Option<Vec<u8>>,
        expires_at_ms: Option<i64>,
    },
    Append {
        id: String,
        entry: Vec<u8>,
        size: i64,
        max_entries: i64,
        max_bytes: i64,
    },
}

impl Params {
    fn of(write: Write) -> Result<Params> {
        Ok(match write {
            Write::Put {
                collection,
                key,
                value,
                expires_at_ms,
            } => Params::Entry {
                table: collection.table_name(),
                key,
                value: Some(canonical(&value)?),
                expires_at_ms: expires_at_ms.map(ms),
            },
            Write::Remove { collection, key } => Params::Entry {
                table: collection.table_name(),
                key,
                value: None,
                expires_at_ms: None,
            },
            Write::Append {
                id,
                entry,
                max_entries,
                max_bytes,
            } => Params::Append {
                size: entry.len() as i64,
                id,
                entry,
                max_entries: ms(max_entries),
                max_bytes: ms(max_bytes),
            },
        })
    }

    fn sql(&self) -> &'static str {
        match self {
            Params::Entry { value: Some(_), .. } => PUT,
            Params::Entry { value: None, .. } => REMOVE,
            Params::Append { .. } => APPEND_REFUSING,
        }
    }

    fn values(&self) -> Vec<&(dyn ToSql + Sync)> {
        match self {
            Params::Entry {
                table,
                key,
                value: Some(value),
                expires_at_ms,
            } => vec![table, key, value, expires_at_ms],
            Params::Entry {
                table,
                key,
                value: None,
                ..
            } => vec![table, key],
            Params::Append {
                id,
                entry,
                size,
                max_entries,
                max_bytes,
            } => vec![id, entry, size, max_entries, max_bytes],
        }
    }
}

#[async_trait]
impl Transaction for PgTransaction {
    async fn claim_once(&mut self, key: &[u8], expires_at_ms: u64) -> Result<bool> {
        let held = self.open.take();
        let had_work = held.is_some();
        let pool = &self.pool;
        let claimed = bounded(self.timeout, async move {
            let (open, begin) = match held {
                Some(open) => (open, false),
                None => (Open::take_from(pool).await?, true),
            };
            let client = open.client();
            let statement = client.prepare_cached(INSERT_NEW).await.map_err(db_error)?;
            let now = now();
            let params: [&(dyn ToSql + Sync); 5] = [
                &Collection::Replay.table_name(),
                &key,
                &b"1".as_slice(),
                &ms(expires_at_ms),
                &now,
            ];
            let claim = client.query(&statement, &params);
            let rows = if begin {
                let (begun, rows) = futures::join!(client.batch_execute("BEGIN"), claim);
                begun.map_err(db_error)?;
                rows
            } else {
                claim.await
            };
            let claimed = !rows.map_err(db_error)?.is_empty();
            Ok((open, claimed))
        })
        .await;
        match claimed {
            Ok((open, claimed)) => {
                self.open = Some(open);
                Ok(claimed)
            }
            Err(error) => {
                self.lost |= had_work;
                Err(error)
            }
        }
    }

    fn is_open(&self) -> bool {
        self.open.is_some()
    }

    async fn get(&mut self, collection: Collection, key: &[u8]) -> Result<Option<RawEntry>> {
        let rows = self.read(GET, &[&collection.table_name(), &key, &now()]).await?;
        Ok(rows.first().map(raw_entry))
    }

    async fn keys(&mut self, collection: Collection, prefix: &[u8], limit: usize) -> Result<Vec<Vec<u8>>> {
        let keys = KeysQuery::new(collection, prefix, limit);
        let rows = self.read(keys.sql(), &keys.params()).await?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }

    async fn entries(
        &mut self,
        collection: Collection,
        prefix: &[u8],
        limit: usize,
    ) -> Result<Vec<ListedEntry>> {
        let keys = KeysQuery::with_entries(collection, prefix, limit);
        let rows = self.read(keys.sql(), &keys.params()).await?;
        Ok(rows.iter().map(KeysQuery::listed).collect())
    }

    async fn commit(&mut self, writes: Vec<Write>) -> Result<()> {
        let held = self.open.take();
        if std::mem::take(&mut self.lost) {
            return Err(StoreError::Unavailable(
                "a step of this request's transaction failed, and it was rolled back".into(),
            ));
        }
        if held.is_none() && writes.is_empty() {
            return Ok(());
        }
        let params = writes
            .into_iter()
            .map(Params::of)
            .collect::<Result<Vec<Params>>>()?;
        let pool = &self.pool;
        bounded(self.timeout, async move {
            let (open, begin) = match held {
                Some(open) => (open, false),
                None => (Open::take_from(pool).await?, true),
            };
            let outcome = run_and_commit(open.client(), begin, &params).await;
            if outcome.is_ok() {
                // Committed: the connection is back outside any transaction.
                open.release();
            }
            // Otherwise dropped: rolled back before it returns to the pool,
            // whichever step failed.
            outcome
        })
        .await
    }
}

/// `BEGIN` (when `begin`), every write and `COMMIT`, pipelined; the first
/// failure in that order is the answer.
async fn run_and_commit(client: &Object, begin: bool, params: &[Params]) -> Result<()> {
    let mut statements = Vec::with_capacity(params.len());
    for write in params {
        statements.push(client.prepare_cached(write.sql()).await.map_err(db_error)?);
    }
    let values: Vec<Vec<&(dyn ToSql + Sync)>> = params.iter().map(Params::values).collect();
    let mut steps: Vec<BoxFuture<'_, std::result::Result<u64, tokio_postgres::Error>>> = Vec::new();
    if begin {
        steps.push(client.batch_execute("BEGIN").map(|done| done.map(|()| 0)).boxed());
    }
    for (statement, values) in statements.iter().zip(&values) {
        steps.push(client.execute(statement, values).boxed());
    }
    steps.push(
        client
            .batch_execute("COMMIT")
            .map(|done| done.map(|()| 0))
            .boxed(),
    );
    let results = join_all(steps).await;
    let writes_from = usize::from(begin);
    let Some((step, error)) = results
        .into_iter()
        .enumerate()
        .find_map(|(step, result)| result.err().map(|error| (step, error)))
    else {
        return Ok(());
    };
    let refused_append = step
        .checked_sub(writes_from)
        .filter(|_| error.code().is_some_and(|code| code.code() == REFUSED_APPEND));
    match refused_append.map(|index| (index, &params[index])) {
        Some((
            index,
            Params::Append {
                id,
                max_entries,
                max_bytes,
                ..
            },
        )) => {
            // Rolled back by now: the stored counters plus this transaction's
            // appends before the refused one are what the quota saw.
            let counters = client.query(HISTORY_COUNT, &[id]).await.map_err(db_error)?;
            let earlier = params[..index]
                .iter()
                .filter(|write| matches!(write, Params::Append { id: other, .. } if other == id))
                .count();
            Err(refusal(
                &counters,
                earlier,
                id,
                *max_entries as u64,
                *max_bytes as u64,
            ))
        }
        _ => Err(db_error(error)),
    }
}
