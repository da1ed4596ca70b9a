//! The shared backend for a fleet of nodes: PostgreSQL (being written in branch `pg`).

use std::time::Duration;

use super::{StoreError, sled::SledBackend};

pub struct PostgresBackend;

impl PostgresBackend {
    pub async fn connect(
        _url: &str,
        _pool_size: usize,
        _timeout: Duration,
    ) -> Result<SledBackend, StoreError> {
        Err(StoreError::Unavailable(
            "the PostgreSQL backend is not built yet".into(),
        ))
    }
}
