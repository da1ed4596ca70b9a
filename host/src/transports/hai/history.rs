//! Sessions in the store: the session record (its secret, its quota charge),
//! the history plugins read back, and `GET {path}/sessions/{id}/history`.

use std::collections::HashMap;
use std::net::IpAddr;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::error::stored_refusal;
use super::session::{Session, Stored};
use super::{HaiError, HaiState, access, wire};
use crate::policy::quota::Charge;
use crate::store::{Collection, now_ms};

pub(super) fn history_id(session_id: &str) -> String {
    format!("hai:{session_id}")
}

impl HaiState {
    /// Keep the session's record alive for another `session_ttl_secs`; the
    /// sweeper removes the record and its history once it lapses.
    ///
    /// The first record claims the id for the whole fleet: a session created
    /// on two nodes at once (each found no record) is kept by the node that
    /// records it first, and the other's turn is refused as another's session,
    /// so neither can replace the other's secret.
    ///
    /// A new record is charged to `client`'s stored sessions ([`StoredQuota`]),
    /// or refused naming the bound; every later one charges what the session's
    /// history grew by since, and keeps the charge alive as long as the session.
    pub(super) async fn record_session(&self, session: &Session, client: IpAddr) -> Result<(), HaiError> {
        let key = history_id(&session.id);
        let store = &self.node.store;
        let now = now_ms();
        let secret = hex::encode(session.secret);
        let existing = store.get::<Value>(Collection::Sessions, key.as_bytes()).await?;
        if existing
            .as_ref()
            .is_some_and(|record| record["secret_sha256"].as_str() != Some(secret.as_str()))
        {
            return Err(HaiError::SessionSecret);
        }
        let created = existing
            .as_ref()
            .and_then(|record| record["created_at_ms"].as_u64())
            .unwrap_or(now);
        let expires = now.saturating_add(self.node.config.hai.session_ttl_secs * 1000);
        let grown = session.take_appended();
        let mut record = json!({"created_at_ms": created, "last_used_ms": now, "secret_sha256": secret});
        let Some(existing) = existing else {
            let charge = self
                .stored
                .admit(&access::client_key(client).to_string(), grown)
                .await
                .map_err(stored_refusal)?;
            record["quota"] = json!(charge);
            if !store
                .insert_new(Collection::Sessions, key.as_bytes(), &record, Some(expires))
                .await?
            {
                let _ = self.stored.refund(&charge).await;
                return Err(HaiError::SessionSecret);
            }
            return Ok(());
        };
        // Records from before the bound carry no charge: nothing to grow.
        if let Ok(mut charge) = serde_json::from_value::<Charge>(existing["quota"].clone()) {
            let bytes = charge.bytes.saturating_add(grown);
            if let Err(error) = self.stored.grow(&mut charge, bytes).await {
                tracing::warn!(transport = "hai", session = %access::session_tag(&session.id), %error, "hai: a session's growth was not counted");
            }
            record["quota"] = json!(charge);
        }
        store
            .put(Collection::Sessions, key.as_bytes(), &record, Some(expires))
            .await?;
        Ok(())
    }

    /// Append to the session's history (what `host::history()` returns to the
    /// plugin); its size is charged when the session is next recorded.
    pub(super) async fn append(&self, session: &Session, role: &str, body: Value) -> Result<(), HaiError> {
        let max_entries = self.node.config.hai.max_history_entries;
        let store = &self.node.store;
        let size = store
            .append_entry(&history_id(&session.id), role, &body, max_entries)
            .await?;
        session.appended(size as u64);
        Ok(())
    }

    /// Make what was appended durable before a client is told about it.
    pub(super) async fn commit(&self) -> Result<(), HaiError> {
        self.node
            .store
            .commit()
            .await
            .map_err(|error| HaiError::Internal(format!("committing to disk failed: {error}")))
    }

    /// What the store knows of a session that is not in memory. An expired record
    /// not yet swept is removed with its history now: the id is free again, and a
    /// new owner must not see what the old one said.
    pub(super) async fn stored_session(&self, session_id: &str) -> Result<Stored, HaiError> {
        let key = history_id(session_id);
        let store = &self.node.store;
        match store.get::<Value>(Collection::Sessions, key.as_bytes()).await? {
            Some(record) => {
                let hash = record["secret_sha256"]
                    .as_str()
                    .and_then(|text| hex::decode(text).ok())
                    .and_then(|bytes| <[u8; 32]>::try_from(bytes).ok());
                Ok(Stored::Known(hash))
            }
            None => {
                if store.expired(Collection::Sessions, key.as_bytes()).await? {
                    store.remove_history(&key).await?;
                    store.remove(Collection::Sessions, key.as_bytes()).await?;
                }
                Ok(Stored::Unknown)
            }
        }
    }

    /// The history endpoint's checks: the operator token, then the session's secret
    /// (its live copy, else its record) unless the id is a bearer id. An unknown
    /// session has nothing to show.
    pub(super) async fn authorize_history(
        &self,
        id: &str,
        query: &HashMap<String, String>,
        headers: &HeaderMap,
    ) -> Result<(), HaiError> {
        let config = &self.node.config.hai;
        access::check_token(
            &config.auth_token,
            query.get(access::TOKEN_PARAM).map(String::as_str),
            headers,
        )?;
        wire::check_session_id(id)?;
        let presented =
            access::presented_secret(query.get(access::SECRET_PARAM).map(String::as_str), headers);
        let expected = match self.hub.live(id) {
            Some(session) => Some(session.secret),
            None => match self.stored_session(id).await? {
                Stored::Known(hash) => Some(hash.ok_or(HaiError::SessionSecret)?),
                Stored::Unknown => None,
            },
        };
        match expected {
            Some(hash) if !access::session_opens(id, presented, &hash) => Err(HaiError::SessionSecret),
            _ => Ok(()),
        }
    }

    /// One page of the session's history (`store.history_page_*` bounds it;
    /// `limit` may only lower the entry bound).
    pub(super) async fn session_history(
        &self,
        session_id: &str,
        after: Option<u64>,
        limit: Option<usize>,
    ) -> Result<crate::store::HistoryPage<Value>, HaiError> {
        let key = history_id(session_id);
        if self
            .node
            .store
            .get::<Value>(Collection::Sessions, key.as_bytes())
            .await?
            .is_none()
        {
            return Ok(crate::store::HistoryPage {
                entries: Vec::new(),
                next_after: None,
            });
        }
        let bounds = &self.node.config.store;
        let limit = limit.map_or(bounds.history_page_entries, |l| {
            l.min(bounds.history_page_entries)
        });
        Ok(self
            .node
            .store
            .history_page(&key, after, limit, bounds.history_page_bytes)
            .await?)
    }
}

/// `GET {path}/sessions/{id}/history[?after=N&limit=M]`: the session's
/// messages, tool results and approvals, oldest first, one bounded page at a
/// time, so a reloaded page can show the conversation. `next_after`, when not
/// null, is the `after` of the next page.
pub(super) async fn history(
    State(shared): State<HaiState>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let number = |name: &str| -> Result<Option<u64>, HaiError> {
        query
            .get(name)
            .map(|text| {
                text.parse::<u64>()
                    .map_err(|_| HaiError::InvalidMessage(format!("{name} must be a whole number")))
            })
            .transpose()
    };
    let result = async {
        shared.authorize_history(&id, &query, &headers).await?;
        let after = number("after")?;
        let limit = number("limit")?.map(|l| usize::try_from(l).unwrap_or(usize::MAX));
        shared.session_history(&id, after, limit).await
    }
    .await;
    match result {
        Ok(page) => {
            axum::Json(json!({"session_id": id, "entries": page.entries, "next_after": page.next_after}))
                .into_response()
        }
        Err(error) => error.to_http(),
    }
}
