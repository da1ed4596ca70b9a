//! Versioned schema migrations, applied by the node at start.
//!
//! Each migration runs in one transaction that first takes a transaction-level
//! advisory lock: nodes starting at once queue on it, and each one, holding
//! the lock, finds in `schema_migrations` whether the version was applied
//! already. So every migration is applied exactly once, and a migration that
//! fails leaves nothing half-done (PostgreSQL's DDL is transactional).
//! The node's `statement_timeout` is lifted inside these transactions: a node
//! waits for another's migration, and a long one is not cut short.

use tokio_postgres::Client;

use super::db_error;
use crate::store::Result;

/// `pg_advisory_xact_lock` key of the migrations ("agoramig" in ASCII).
const MIGRATION_LOCK: i64 = 0x6167_6f72_616d_6967;

/// In order; a version is never edited once released, only followed.
pub(super) const MIGRATIONS: &[(i32, &str)] = &[
    (1, include_str!("../migrations/0001_initial.sql")),
    (2, include_str!("../migrations/0002_fleet_plugins.sql")),
];

/// Apply every migration this database lacks; how many this call applied.
pub(super) async fn migrate(client: &mut Client) -> Result<usize> {
    let mut applied = 0;
    for (version, sql) in MIGRATIONS {
        let transaction = client.transaction().await.map_err(db_error)?;
        transaction
            .batch_execute(&format!(
                "SET LOCAL statement_timeout = 0;
                 SELECT pg_advisory_xact_lock({MIGRATION_LOCK});
                 CREATE TABLE IF NOT EXISTS schema_migrations (
                     version    integer     PRIMARY KEY,
                     applied_at timestamptz NOT NULL DEFAULT now()
                 );"
            ))
            .await
            .map_err(db_error)?;
        let done = transaction
            .query_opt("SELECT 1 FROM schema_migrations WHERE version = $1", &[version])
            .await
            .map_err(db_error)?
            .is_some();
        if !done {
            transaction.batch_execute(sql).await.map_err(db_error)?;
            transaction
                .execute("INSERT INTO schema_migrations (version) VALUES ($1)", &[version])
                .await
                .map_err(db_error)?;
            applied += 1;
        }
        transaction.commit().await.map_err(db_error)?;
    }
    Ok(applied)
}
