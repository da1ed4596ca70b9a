//! The fleet's plugin set in PostgreSQL: `plugin_set` names each file's
//! content, `plugin_blobs` holds each content once (migration 0002).

use async_trait::async_trait;

use super::{PostgresBackend, db_error, pool_error};
use crate::store::Result;
use crate::store::now_ms;
use crate::store::plugin_set::{PluginSet, PublishedPlugin};

/// Delete the contents no published file names (after a replace or a removal).
const DROP_ORPHANS: &str =
    "DELETE FROM plugin_blobs b WHERE NOT EXISTS (SELECT 1 FROM plugin_set s WHERE s.sha256 = b.sha256)";

const MARK_SEEDED: &str =
    "INSERT INTO plugin_set_seeded (seeded_by, at_ms) VALUES ($1, $2) ON CONFLICT (one) DO NOTHING";

#[async_trait]
impl PluginSet for PostgresBackend {
    async fn published(&self) -> Result<Vec<PublishedPlugin>> {
        let rows = self
            .query(
                "SELECT file, sha256, size, published_at_ms, published_by FROM plugin_set ORDER BY file",
                &[],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|row| PublishedPlugin {
                file: row.get(0),
                sha256: row.get(1),
                size: row.get::<_, i64>(2).max(0) as u64,
                published_at_ms: row.get::<_, i64>(3).max(0) as u64,
                published_by: row.get(4),
            })
            .collect())
    }

    async fn content(&self, sha256: &str) -> Result<Option<Vec<u8>>> {
        let rows = self
            .query("SELECT bytes FROM plugin_blobs WHERE sha256 = $1", &[&sha256])
            .await?;
        Ok(rows.first().map(|row| row.get(0)))
    }

    async fn publish(&self, file: &str, sha256: &str, bytes: &[u8], by: &str) -> Result<bool> {
        let now = now_ms() as i64;
        self.bounded(async {
            let mut client = self.pool.get().await.map_err(pool_error)?;
            let transaction = client.transaction().await.map_err(db_error)?;
            transaction
                .execute(MARK_SEEDED, &[&by, &now])
                .await
                .map_err(db_error)?;
            let same = transaction
                .query_opt(
                    "SELECT 1 FROM plugin_set WHERE file = $1 AND sha256 = $2",
                    &[&file, &sha256],
                )
                .await
                .map_err(db_error)?
                .is_some();
            if !same {
                transaction
                    .execute(
                        "INSERT INTO plugin_blobs (sha256, bytes) VALUES ($1, $2) ON CONFLICT (sha256) DO NOTHING",
                        &[&sha256, &bytes],
                    )
                    .await
                    .map_err(db_error)?;
                transaction
                    .execute(
                        "INSERT INTO plugin_set (file, sha256, size, published_at_ms, published_by)
                         VALUES ($1, $2, $3, $4, $5)
                         ON CONFLICT (file) DO UPDATE SET sha256 = EXCLUDED.sha256, size = EXCLUDED.size,
                             published_at_ms = EXCLUDED.published_at_ms, published_by = EXCLUDED.published_by",
                        &[&file, &sha256, &(bytes.len() as i64), &now, &by],
                    )
                    .await
                    .map_err(db_error)?;
                transaction.execute(DROP_ORPHANS, &[]).await.map_err(db_error)?;
            }
            transaction.commit().await.map_err(db_error)?;
            Ok(!same)
        })
        .await
    }

    async fn unpublish(&self, file: &str) -> Result<bool> {
        self.bounded(async {
            let mut client = self.pool.get().await.map_err(pool_error)?;
            let transaction = client.transaction().await.map_err(db_error)?;
            let removed = transaction
                .execute("DELETE FROM plugin_set WHERE file = $1", &[&file])
                .await
                .map_err(db_error)?;
            transaction.execute(DROP_ORPHANS, &[]).await.map_err(db_error)?;
            transaction.commit().await.map_err(db_error)?;
            Ok(removed > 0)
        })
        .await
    }

    async fn seed(&self, files: &[(String, String, Vec<u8>)], by: &str) -> Result<bool> {
        let now = now_ms() as i64;
        self.bounded(async {
            let mut client = self.pool.get().await.map_err(pool_error)?;
            let transaction = client.transaction().await.map_err(db_error)?;
            // The marker row's insert is the race: of nodes seeding at once,
            // one inserts it, the others wait on its key and then find it taken.
            let first = transaction
                .execute(MARK_SEEDED, &[&by, &now])
                .await
                .map_err(db_error)?
                > 0;
            if first {
                for (file, sha256, bytes) in files {
                    transaction
                        .execute(
                            "INSERT INTO plugin_blobs (sha256, bytes) VALUES ($1, $2) ON CONFLICT (sha256) DO NOTHING",
                            &[sha256, bytes],
                        )
                        .await
                        .map_err(db_error)?;
                    transaction
                        .execute(
                            "INSERT INTO plugin_set (file, sha256, size, published_at_ms, published_by)
                             VALUES ($1, $2, $3, $4, $5)",
                            &[file, sha256, &(bytes.len() as i64), &now, &by],
                        )
                        .await
                        .map_err(db_error)?;
                }
            }
            transaction.commit().await.map_err(db_error)?;
            Ok(first)
        })
        .await
    }
}
