//! What the host functions of a running call reach: the plugin limits, the
//! node's configuration and store, its one Almanac resolver, and the
//! node-wide call slots and parking places.
//!
//! A call parked for a human's approval may wait minutes; its share of the
//! places is [`super::approval`]'s to keep fair.
//!
//! Every instance holds an `Arc` of this, never of the runtime itself: an
//! idle warm instance lives inside the registry the runtime owns, so a strong
//! handle back would keep the runtime alive for ever (see [`super`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::InvokeError;
use super::approval::Approvals;
use super::instance::CallSlot;
use super::llm::LlmBudget;
use super::settings::Settings;
use crate::config::{Config, PluginsConfig};
use crate::metrics::Metrics;
use crate::peers::almanac::{self, Resolver};
use crate::store::Store;

pub(crate) struct HostEnv {
    pub(crate) config: PluginsConfig,
    pub(crate) node_config: Arc<Config>,
    pub(crate) store: Store,
    /// The node's one Almanac resolver (`uagents.almanac_api`), made here because
    /// the runtime is built first: plugins' uAgents messages to a bare address and
    /// the uAgents transport's replies share it and its cache.
    pub(crate) almanac: Option<Arc<Resolver>>,
    /// Each plugin's `[plugins.NAME.*]` settings, swapped when the configuration file changes.
    pub(crate) settings: Settings,
    /// The model's limits and each plugin's use of them (`llm`).
    pub(crate) llm: Arc<LlmBudget>,
    call_slots: Arc<Semaphore>,
    /// Places for parked calls: `plugins.max_parked_calls`, at most half of
    /// `plugins.max_instances` (the rest stay for calls that run).
    parked: Arc<Semaphore>,
    pub(crate) max_parked: usize,
    /// Every approval waiting on the node, with its fair share of the places.
    pub(crate) approvals: Approvals,
}

impl HostEnv {
    pub(crate) fn new(node_config: Arc<Config>, store: Store, metrics: Metrics) -> HostEnv {
        let config = node_config.plugins.clone();
        let max_parked = config.max_parked_calls.min(config.max_instances as usize / 2);
        HostEnv {
            call_slots: Arc::new(Semaphore::new(config.max_concurrent_calls)),
            parked: Arc::new(Semaphore::new(max_parked)),
            max_parked,
            approvals: Approvals::new(&node_config.tools, max_parked),
            settings: Settings::new(config.settings.clone()),
            llm: Arc::new(LlmBudget::new(node_config.llm.clone(), store.clone(), metrics)),
            config,
            almanac: almanac::node_resolver(&node_config),
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
