//! The arena's public keys (AAP §4: "la clave pública de Agora … jwks.json").
//!
//! Keys come from `arena.jwks_url` (fetched, cached) or `arena.jwks_file`.
//! A token naming a `kid` the cache lacks triggers one refetch (one in flight
//! at a time, at most once per `arena.jwks_min_refetch_ms`), so the arena can
//! rotate keys without a restart while a flood of bogus `kid`s cannot turn
//! the node into a JWKS hammer. The set is also reloaded every
//! `arena.jwks_refresh_secs`. A refetched set replaces the old one, so a
//! key the arena withdraws stops verifying; a failed fetch keeps the old set.
//!
//! The JWKS URL is `https://` (plain `http://` only to a loopback host, see
//! `ArenaConfig::validate`), and redirects are never followed: the keys that
//! decide who may run tasks come from exactly the configured address.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::RwLock;

use crate::config::ArenaConfig;
use crate::crypto::jwt::{JwtError, KeySet, VerifyingKey};

/// Largest JWK Set accepted.
const MAX_JWKS_BYTES: u64 = 256 * 1024;
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("this node has no arena keys configured (arena.jwks_url or arena.jwks_file)")]
    NotConfigured,
    #[error("cannot load the arena's keys: {0}")]
    Load(String),
    #[error(transparent)]
    Jwt(#[from] JwtError),
}

enum Source {
    None,
    Url(String),
    File(PathBuf),
}

struct Cached {
    keys: Arc<KeySet>,
    loaded_at: Option<Instant>,
}

pub struct KeyCache {
    source: Source,
    min_refetch: Duration,
    cached: RwLock<Cached>,
    /// Serialises reloads: concurrent unknown `kid`s share one fetch.
    reloading: tokio::sync::Mutex<()>,
}

impl KeyCache {
    pub fn new(config: &ArenaConfig) -> KeyCache {
        let source = if !config.jwks_url.is_empty() {
            Source::Url(config.jwks_url.clone())
        } else if !config.jwks_file.as_os_str().is_empty() {
            Source::File(config.jwks_file.clone())
        } else {
            Source::None
        };
        KeyCache {
            source,
            min_refetch: Duration::from_millis(config.jwks_min_refetch_ms),
            cached: RwLock::new(Cached {
                keys: Arc::new(KeySet::default()),
                loaded_at: None,
            }),
            reloading: tokio::sync::Mutex::new(()),
        }
    }

    pub fn is_configured(&self) -> bool {
        !matches!(self.source, Source::None)
    }

    /// The key named `kid`, reloading the set once if it is unknown and the
    /// last load is old enough.
    pub async fn key(&self, kid: &str) -> Result<VerifyingKey, KeyError> {
        if !self.is_configured() {
            return Err(KeyError::NotConfigured);
        }
        if let Some(key) = self.cached.read().keys.get(kid) {
            return Ok(key.clone());
        }
        let _reload = self.reloading.lock().await;
        // Another request may have reloaded while this one waited.
        let (keys, loaded_at) = {
            let cached = self.cached.read();
            (cached.keys.clone(), cached.loaded_at)
        };
        if let Some(key) = keys.get(kid) {
            return Ok(key.clone());
        }
        if loaded_at.is_some_and(|at| at.elapsed() < self.min_refetch) {
            return Err(JwtError::UnknownKid(kid.chars().take(64).collect()).into());
        }
        let result = self.load().await;
        let mut cached = self.cached.write();
        // A failed load also counts, so an unreachable JWKS is not retried per request.
        cached.loaded_at = Some(Instant::now());
        let keys = result?;
        tracing::info!(keys = keys.len(), "arena keys loaded");
        cached.keys = Arc::new(keys);
        cached
            .keys
            .get(kid)
            .cloned()
            .ok_or_else(|| JwtError::UnknownKid(kid.chars().take(64).collect()).into())
    }

    /// Load the set now (start-up), so the first task does not wait on the fetch.
    pub async fn preload(&self) {
        self.reload("arena keys not loaded yet").await;
    }

    /// The scheduled reload (`arena.jwks_refresh_secs`).
    pub async fn refresh(&self) {
        self.reload("scheduled arena key refresh failed; keeping the previous keys")
            .await;
    }

    async fn reload(&self, failure: &'static str) {
        if !self.is_configured() {
            return;
        }
        let _reload = self.reloading.lock().await;
        let result = self.load().await;
        let mut cached = self.cached.write();
        cached.loaded_at = Some(Instant::now());
        match result {
            Ok(keys) => {
                tracing::info!(keys = keys.len(), "arena keys loaded");
                cached.keys = Arc::new(keys);
            }
            Err(error) => tracing::warn!(%error, "{failure}"),
        }
    }

    async fn load(&self) -> Result<KeySet, KeyError> {
        let bytes = match &self.source {
            Source::None => return Err(KeyError::NotConfigured),
            Source::File(path) => {
                let path = path.clone();
                tokio::task::spawn_blocking(move || read_file(&path))
                    .await
                    .map_err(|e| KeyError::Load(e.to_string()))??
            }
            Source::Url(url) => fetch(url).await?,
        };
        Ok(KeySet::parse(&bytes)?)
    }
}

fn read_file(path: &std::path::Path) -> Result<Vec<u8>, KeyError> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| KeyError::Load(format!("{}: {e}", path.display())))?;
    let mut bytes = Vec::new();
    file.take(MAX_JWKS_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| KeyError::Load(format!("{}: {e}", path.display())))?;
    if bytes.len() as u64 > MAX_JWKS_BYTES {
        return Err(KeyError::Load(format!(
            "{} is over {MAX_JWKS_BYTES} bytes",
            path.display()
        )));
    }
    Ok(bytes)
}

/// GET the JWKS through the shared outbound client, bounded in time and
/// size. A redirect is an error, not a hop: whoever can answer a 3xx at the
/// configured URL must not get to pick the host that supplies the keys.
async fn fetch(url: &str) -> Result<Vec<u8>, KeyError> {
    let response = crate::peers::http_client::request(
        "GET",
        url,
        &[("accept", "application/json")],
        Vec::new(),
        FETCH_TIMEOUT,
        MAX_JWKS_BYTES as usize,
    )
    .await
    .map_err(|e| KeyError::Load(e.to_string()))?;
    let status = response.status;
    if (300..400).contains(&status) {
        return Err(KeyError::Load(format!(
            "{url} answered {status} (a redirect); redirects are not followed for the JWKS, \
             configure arena.jwks_url with the final address"
        )));
    }
    if status != 200 {
        return Err(KeyError::Load(format!("{url} answered {status}")));
    }
    Ok(response.body.to_vec())
}
