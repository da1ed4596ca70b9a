//! Plugin schedules: the host calls a plugin's `tick(name)` at the times its
//! capabilities declare (`every = "30s"` or a cron pattern, in UTC).
//!
//! Each schedule of each loaded plugin version has one timer task. A run is a
//! plugin call like any other — a fresh instance, a node-wide call slot, the
//! same fuel, memory and time limits — in an exchange of its own (no caller to
//! stream to, no human to approve a risky tool, so such a tool fails). At most
//! one run of a schedule is in flight: a tick that comes while the previous
//! run still goes is skipped and counted (`agora_schedule_runs_total{outcome="skipped"}`),
//! never queued, so a slow plugin cannot pile up work. When a plugin is
//! replaced or removed its timers stop at once; a run already going finishes
//! on the version it started with (bounded by `plugins.call_timeout_ms`).
//! Timers and runs are the node's [`Background`] tasks: shutdown ends them.
//!
//! A fleet on a shared store is one agent, so a tick runs once in the fleet,
//! not once per node: due times are the same on every node (intervals fall on
//! their multiples since the Unix epoch, cron patterns on their occurrences),
//! and the node that claims a due time in the store first (an insert-if-absent
//! of `schedule\0plugin\0name\0due`) runs it; the others count the tick as
//! run `elsewhere`. A node too busy to take a tick does not claim it, so
//! another may.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use std::time::Duration;

use super::bindings::agent::exports::agora::node::extensions::GuestIndices as AgentIndices;
use super::exchange::Exchange;
use super::{InvokeError, LoadedPlugin, Runtime, RuntimeInner, instance};
use crate::background::Background;
use crate::store::Collection;

/// How long a fleet's claim on a tick is kept after its due time.
const CLAIM_KEPT_MS: u64 = 10 * 60 * 1000;

/// The timer tasks of the plugin versions now loaded, by content hash and file.
#[derive(Default)]
struct Timers {
    running: HashMap<(std::path::PathBuf, String), Vec<tokio::task::JoinHandle<()>>>,
}

impl Drop for Timers {
    fn drop(&mut self) {
        for tasks in self.running.values() {
            tasks.iter().for_each(|task| task.abort());
        }
    }
}

impl Runtime {
    /// Keep one timer per declared schedule of every loaded plugin, following
    /// the registry as it changes; ends when the runtime is dropped. Timers and
    /// runs are spawned on `background`.
    pub fn run_schedules(&self, background: Background) -> impl Future<Output = ()> + Send + 'static {
        let mut changes = self.registry_changes();
        let runtime = Arc::downgrade(&self.inner);
        async move {
            let mut timers = Timers::default();
            loop {
                let Some(current) = Runtime::from_weak(&runtime) else {
                    return;
                };
                current.align_timers(&mut timers, &runtime, &background);
                if changes.changed().await.is_err() {
                    return;
                }
            }
        }
    }

    /// Stop the timers of versions no longer loaded; start those of new ones.
    fn align_timers(&self, timers: &mut Timers, runtime: &Weak<RuntimeInner>, background: &Background) {
        let registry = self.registry();
        let loaded: HashMap<_, _> = registry
            .plugins()
            .filter(|plugin| plugin.agent.is_some() && !plugin.capabilities.schedules.is_empty())
            .map(|plugin| ((plugin.file.clone(), plugin.content_hash.clone()), plugin.clone()))
            .collect();
        timers.running.retain(|key, tasks| {
            let keep = loaded.contains_key(key);
            if !keep {
                tasks.iter().for_each(|task| task.abort());
            }
            keep
        });
        for (key, plugin) in loaded {
            if timers.running.contains_key(&key) {
                continue;
            }
            let tasks = (0..plugin.capabilities.schedules.len())
                .map(|index| {
                    let timer = timer(runtime.clone(), plugin.clone(), index, background.clone());
                    background.spawn("plugins.schedule_timer", timer)
                })
                .collect();
            tracing::info!(plugin = %plugin.manifest.name, schedules = ?plugin.capabilities.schedules.iter().map(|s| &s.name).collect::<Vec<_>>(), "schedules started");
            timers.running.insert(key, tasks);
        }
    }

    /// Whether this node runs the tick of `plugin`'s schedule `name` due at
    /// `due_ms`: always alone, the first to claim it on a shared store.
    async fn claim_tick(
        &self,
        plugin: &str,
        name: &str,
        due_ms: u64,
    ) -> Result<bool, crate::store::StoreError> {
        let store = &self.inner.host.store;
        if !store.is_shared() {
            return Ok(true);
        }
        let key = format!("schedule\0{plugin}\0{name}\0{due_ms}");
        // Kept well past the due time, so a node whose clock or timer runs late
        // still finds the claim; the sweeper removes it after.
        let expires = due_ms + CLAIM_KEPT_MS;
        store
            .insert_new(Collection::Meta, key.as_bytes(), &due_ms, Some(expires))
            .await
    }

    /// One run of the schedule `name` of `plugin`.
    async fn tick(
        &self,
        plugin: &Arc<LoadedPlugin>,
        agent: &AgentIndices,
        name: &str,
    ) -> Result<(), InvokeError> {
        let plugin_name: Arc<str> = Arc::from(plugin.manifest.name.as_str());
        let slot = self.inner.host.call_slot().await?;
        let mut store = instance::new_store(
            &self.inner,
            plugin_name.clone(),
            Some(plugin_name),
            Exchange::new(),
        );
        store.data_mut().slot.permit = Some(slot);
        let outcome = async {
            let instance = plugin.pre.instance_pre().instantiate_async(&mut store).await?;
            let agent = agent.load(&mut store, &instance)?;
            agent.call_tick(&mut store, name).await
        }
        .await;
        instance::drain_stdio(&store);
        match outcome {
            Ok(Ok(())) => Ok(()),
            Ok(Err(message)) => Err(InvokeError::Failure {
                kind: crate::vocab::FailureKind::Internal,
                message: super::settings::redact(&message, &store.data().secrets_read).into_owned(),
            }),
            Err(error) => Err(instance::classify(&mut store, error)),
        }
    }
}

/// The timer of one schedule: wait, run unless the previous run still goes, repeat.
async fn timer(runtime: Weak<RuntimeInner>, plugin: Arc<LoadedPlugin>, index: usize, background: Background) {
    let (Some(schedule), Some(agent)) = (plugin.capabilities.schedules.get(index), plugin.agent.clone())
    else {
        return;
    };
    let busy = Arc::new(AtomicBool::new(false));
    loop {
        let now = crate::store::now_ms();
        let due = schedule.when.next_due(now);
        tokio::time::sleep(Duration::from_millis(due.saturating_sub(now))).await;
        let Some(runtime) = Runtime::from_weak(&runtime) else {
            return;
        };
        let plugin_name = plugin.manifest.name.as_str();
        if busy.swap(true, Ordering::AcqRel) {
            tracing::debug!(plugin = plugin_name, schedule = %schedule.name, "previous run still going; this one skipped");
            runtime.metrics().observe_schedule_run(plugin_name, "skipped");
            continue;
        }
        let (running, plugin, agent, name) = (
            RunningTick(busy.clone()),
            plugin.clone(),
            agent.clone(),
            schedule.name.clone(),
        );
        background.spawn("plugins.schedule_run", async move {
            let plugin_name = plugin.manifest.name.as_str();
            match runtime.claim_tick(plugin_name, &name, due).await {
                Ok(true) => {}
                Ok(false) => {
                    runtime.metrics().observe_schedule_run(plugin_name, "elsewhere");
                    return;
                }
                Err(error) => {
                    tracing::warn!(plugin = plugin_name, schedule = %name, %error, "cannot claim the tick in the shared store; skipped");
                    runtime.metrics().observe_schedule_run(plugin_name, "unavailable");
                    return;
                }
            }
            let started = std::time::Instant::now();
            let result = runtime.tick(&plugin, &agent, &name).await;
            let outcome = match &result {
                Ok(()) => "ok",
                Err(error) => {
                    tracing::warn!(plugin = plugin_name, schedule = %name, %error, "scheduled run failed");
                    error.outcome()
                }
            };
            runtime.metrics().observe_schedule_run(plugin_name, outcome);
            runtime
                .metrics()
                .observe_outcome("schedule", plugin_name, outcome, started.elapsed());
            drop(running);
        });
    }
}

/// Marks a schedule's run as going until dropped: however the run ends (a
/// skipped claim, an error, a panic), the next tick is not skipped for it.
struct RunningTick(Arc<AtomicBool>);

impl Drop for RunningTick {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}
