//! Warm instances: the `warm` instance policy of `types.instance-policy`
//! (plugin-sdk/wit/agora-node.wit), a bounded pool of reused (store, instance)
//! pairs per loaded plugin version.
//!
//! A fresh instance of a Python or JavaScript component costs far more than
//! the call itself (its interpreter initialises its heap on instantiation), so
//! a plugin may ask for `warm(max-invocations, max-concurrency, idle-timeout-ms)`:
//!
//! - at most `max-concurrency` calls of the plugin run at once, each on its own
//!   instance; more calls wait up to `plugins.queue_timeout_ms`, then are refused
//!   as overloaded;
//! - an instance serves at most `max-invocations` calls, then is retired;
//! - an instance idle longer than `idle-timeout-ms` is dropped (0: never kept idle);
//! - an instance whose call trapped, timed out, hit its memory limit, returned an
//!   oversized reply or was cancelled mid-call is discarded, never reused: its
//!   memory may be half-updated;
//! - the pool belongs to one [`super::LoadedPlugin`]: a reload or removal drops
//!   it with the old version once its last in-flight call has finished.
//!
//! What the host resets per call on a reused store: the exchange (where events
//! go, whose history is read, who approves tools), the event counter, the
//! execution-time budget and the memory-refusal flag. Stdout and stderr are
//! drained to the log after every call.
//!
//! What a warm instance MAY leak from one request to the next, by design: its
//! whole linear memory — globals, statics, module-level variables (Python),
//! the global object (JavaScript), caches, allocator state, and anything a
//! previous request's input left there — plus WASI resources it kept open in
//! its resource table, and the state of its random generator. A request can
//! therefore observe (and be influenced by) what earlier requests from other
//! senders did. That is why protocol handlers that parse untrusted input stay
//! `fresh` (the default): a parser bug that corrupts state, or a request
//! crafted to plant data, would otherwise reach every later request served by
//! that instance, across senders and conversations. Warm is for handlers whose
//! state is deliberately shared (caches of immutable data, a loaded model)
//! and whose authors accept that one request can see another's leftovers.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use wasmtime::Store;
use wasmtime::component::Instance;

use super::bindings::{Plugin, PluginPre};
use super::exchange::Exchange;
use super::instance::{self, PluginState};
use super::{InvokeError, RuntimeInner};

/// How often idle instances are looked at for expiry.
const REAP_EVERY: Duration = Duration::from_millis(500);

/// The limits a plugin's manifest asked for (already bounded by manifest validation).
#[derive(Debug, Clone, Copy)]
pub struct WarmLimits {
    pub max_invocations: u32,
    pub max_concurrency: u32,
    pub idle_timeout: Duration,
}

/// One reusable instance and the store it lives in.
pub struct WarmInstance {
    pub(crate) store: Store<PluginState>,
    pub(crate) plugin: Plugin,
    /// The instance itself, for the optional exports `plugin` does not hold (`prompts.get`).
    pub(crate) instance: Instance,
    invocations: u32,
    idle_since: Instant,
}

/// The pool of one loaded plugin version.
pub struct WarmPool {
    limits: WarmLimits,
    idle: Mutex<Vec<WarmInstance>>,
    permits: Arc<Semaphore>,
}

/// A checked-out instance. Dropping it without [`WarmPool::check_in`] (a trap,
/// a cancelled request) discards the instance; the concurrency permit is
/// released either way.
pub struct Lease {
    pub(crate) instance: WarmInstance,
    _permit: OwnedSemaphorePermit,
}

impl WarmPool {
    /// A pool for one plugin version, with a reaper that ends when the pool is dropped.
    pub fn new(limits: WarmLimits) -> Arc<WarmPool> {
        let pool = Arc::new(WarmPool {
            limits,
            idle: Mutex::new(Vec::new()),
            permits: Arc::new(Semaphore::new(limits.max_concurrency.max(1) as usize)),
        });
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(reap(Arc::downgrade(&pool)));
        }
        pool
    }

    /// Wait for one of the pool's `max-concurrency` places, up to `queue_timeout`.
    pub async fn reserve(&self, queue_timeout: Duration) -> Result<OwnedSemaphorePermit, InvokeError> {
        match tokio::time::timeout(queue_timeout, self.permits.clone().acquire_owned()).await {
            Ok(Ok(permit)) => Ok(permit),
            _ => Err(InvokeError::Overloaded),
        }
    }

    /// Take an idle instance, or instantiate one, with the per-call state reset
    /// for this call's `exchange`.
    pub async fn check_out(
        &self,
        permit: OwnedSemaphorePermit,
        runtime: &Arc<RuntimeInner>,
        pre: &PluginPre<PluginState>,
        plugin_name: &str,
        exchange: Exchange,
    ) -> Result<Lease, InvokeError> {
        let reused = self.take_idle();
        let mut instance = match reused {
            Some(instance) => instance,
            None => {
                let mut store = instance::new_store(
                    runtime,
                    Arc::from(plugin_name),
                    Some(Arc::from(plugin_name)),
                    Exchange::new(),
                );
                let made = match pre.instance_pre().instantiate_async(&mut store).await {
                    Ok(made) => Plugin::new(&mut store, &made).map(|plugin| (plugin, made)),
                    Err(error) => Err(error),
                };
                match made {
                    Ok((plugin, made)) => WarmInstance {
                        store,
                        plugin,
                        instance: made,
                        invocations: 0,
                        idle_since: Instant::now(),
                    },
                    Err(error) => return Err(instance::classify(&mut store, error)),
                }
            }
        };
        instance::begin_call(&mut instance.store, exchange);
        instance.invocations += 1;
        Ok(Lease {
            instance,
            _permit: permit,
        })
    }

    /// Return an instance whose call ended cleanly; it is kept only if it has
    /// invocations left and may idle at all.
    pub fn check_in(&self, lease: Lease) {
        let Lease {
            mut instance,
            _permit,
        } = lease;
        if instance.invocations >= self.limits.max_invocations || self.limits.idle_timeout.is_zero() {
            return;
        }
        // Do not keep the exchange alive: its event channel must close when the request ends.
        instance::end_call(&mut instance.store);
        instance.idle_since = Instant::now();
        self.idle.lock().push(instance);
    }

    /// The most recently used idle instance that has not expired; expired ones are dropped.
    fn take_idle(&self) -> Option<WarmInstance> {
        let mut idle = self.idle.lock();
        let timeout = self.limits.idle_timeout;
        idle.retain(|instance| instance.idle_since.elapsed() < timeout);
        idle.pop()
    }

    fn reap_expired(&self) {
        let timeout = self.limits.idle_timeout;
        // Drop the expired instances outside the lock: freeing a store returns its pooled slot.
        let expired: Vec<WarmInstance> = {
            let mut idle = self.idle.lock();
            let (keep, expired) = std::mem::take(&mut *idle)
                .into_iter()
                .partition(|instance| instance.idle_since.elapsed() < timeout);
            *idle = keep;
            expired
        };
        drop(expired);
    }
}

async fn reap(pool: Weak<WarmPool>) {
    let mut ticks = tokio::time::interval(REAP_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        match pool.upgrade() {
            Some(pool) => pool.reap_expired(),
            None => return,
        }
    }
}
