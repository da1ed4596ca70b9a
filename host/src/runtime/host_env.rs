//! What the host functions of a running call reach: the plugin limits, the
//! node's configuration and store, and the node-wide call slots and parking
//! places.
//!
//! A call parked for a human's approval may wait minutes, so its places are
//! shared fairly ([`crate::policy::admission`]): one caller holds at most
//! `tools.max_waiting_approvals_per_client`, one transport at most
//! `tools.max_waiting_approvals_per_transport`, so no address and no protocol
//! can take every place from the others' humans.
//!
//! Every instance holds an `Arc` of this, never of the runtime itself: an
//! idle warm instance lives inside the registry the runtime owns, so a strong
//! handle back would keep the runtime alive for ever (see [`super`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::InvokeError;
use super::exchange::Caller;
use super::instance::CallSlot;
use super::llm::LlmBudget;
use super::settings::Settings;
use crate::config::{Config, PluginsConfig};
use crate::metrics::Metrics;
use crate::policy::admission::{Admission, Bounds, Slot};
use crate::store::Store;

pub(crate) struct HostEnv {
    pub(crate) config: PluginsConfig,
    pub(crate) node_config: Arc<Config>,
    pub(crate) store: Store,
    /// Each plugin's `[plugins.NAME.*]` settings, swapped when the configuration file changes.
    pub(crate) settings: Settings,
    /// The model's limits and each plugin's use of them (`llm`).
    pub(crate) llm: Arc<LlmBudget>,
    call_slots: Arc<Semaphore>,
    /// Places for parked calls: `plugins.max_parked_calls`, at most half of
    /// `plugins.max_instances` (the rest stay for calls that run).
    parked: Arc<Semaphore>,
    pub(crate) max_parked: usize,
    /// Approval waits by caller, and by transport.
    approvals_by_client: Admission<String>,
    approvals_by_transport: Admission<&'static str>,
}

/// A parked approval's share of its caller's and its transport's places,
/// given back when dropped (its parking place travels on its own, as every
/// parked wait's does).
pub(crate) struct ApprovalShare {
    _client: Option<Slot<String>>,
    _transport: Option<Slot<&'static str>>,
}

impl HostEnv {
    pub(crate) fn new(node_config: Arc<Config>, store: Store, metrics: Metrics) -> HostEnv {
        let config = node_config.plugins.clone();
        let max_parked = config.max_parked_calls.min(config.max_instances as usize / 2);
        let tools = &node_config.tools;
        let share = |per: usize, per_key: &'static str| Bounds {
            total: max_parked,
            total_key: "plugins.max_parked_calls",
            per_client: per,
            per_client_key: per_key,
            wait: Duration::ZERO,
        };
        HostEnv {
            call_slots: Arc::new(Semaphore::new(config.max_concurrent_calls)),
            parked: Arc::new(Semaphore::new(max_parked)),
            max_parked,
            approvals_by_client: Admission::new(share(
                tools.max_waiting_approvals_per_client,
                "tools.max_waiting_approvals_per_client",
            )),
            approvals_by_transport: Admission::new(share(
                tools.max_waiting_approvals_per_transport,
                "tools.max_waiting_approvals_per_transport",
            )),
            settings: Settings::new(config.settings.clone()),
            llm: Arc::new(LlmBudget::new(node_config.llm.clone(), store.clone(), metrics)),
            config,
            node_config,
            store,
        }
    }

    /// One of `plugins.max_concurrent_calls` node-wide slots, waited for up to
    /// `plugins.queue_timeout_ms`.
    pub(crate) async fn call_slot(&self) -> Result<OwnedSemaphorePermit, InvokeError> {
        let wait = Duration::from_millis(self.config.queue_timeout_ms);
        match tokio::time::timeout(wait, self.call_slots.clone().acquire_owned()).await {
            Ok(Ok(permit)) => Ok(permit),
            _ => Err(InvokeError::Overloaded),
        }
    }

    /// A place to park a call in, if one of `plugins.max_parked_calls` is free.
    pub(crate) fn park_place(&self) -> Option<OwnedSemaphorePermit> {
        self.parked.clone().try_acquire_owned().ok()
    }

    /// A parking place for a call that waits for a human's approval, within
    /// its caller's and its transport's share; or why there is none.
    pub(crate) fn approval_place(
        &self,
        caller: Option<&Caller>,
    ) -> Result<(OwnedSemaphorePermit, ApprovalShare), String> {
        let (client, transport) = match caller {
            Some(caller) => (
                Some(
                    self.approvals_by_client
                        .try_admit(&caller.client)
                        .map_err(|refusal| refusal.to_string())?,
                ),
                Some(
                    self.approvals_by_transport
                        .try_admit(&caller.transport)
                        .map_err(|refusal| format!("{} ({})", refusal, caller.transport))?,
                ),
            ),
            None => (None, None),
        };
        let park = self.park_place().ok_or_else(|| {
            format!(
                "{} calls already wait on the node (plugins.max_parked_calls)",
                self.max_parked
            )
        })?;
        Ok((
            park,
            ApprovalShare {
                _client: client,
                _transport: transport,
            },
        ))
    }

    /// Await `wait` (a host wait on something external) parked in `place`:
    /// without the caller's call slot, which is taken again afterwards. With no
    /// place, the caller waits holding its slot, as before parking existed. A
    /// call that finds no slot again within `queue_timeout_ms` is marked lost
    /// and ends as overloaded (see [`CallSlot`]).
    pub(crate) async fn while_parked<F: Future>(
        &self,
        slot: &mut CallSlot,
        place: Option<OwnedSemaphorePermit>,
        wait: F,
    ) -> F::Output {
        let Some(place) = place else {
            return wait.await;
        };
        let held = slot.permit.take().is_some();
        let output = wait.await;
        if held {
            match self.call_slot().await {
                Ok(permit) => slot.permit = Some(permit),
                Err(_) => slot.lost = true,
            }
        }
        drop(place);
        output
    }
}
