//! One plugin call: a store with its limits, a fresh instance from the
//! pre-linked component, the call, and the classification of how it ended.
//!
//! Time is enforced by epoch interruption: every tick (10 ms) the plugin
//! yields to the async executor, and once it has run for its budget of ticks
//! it traps. Memory, tables and instances are bounded by [`CallLimiter`].
//! Nothing a plugin does here can outlive or escape its store. A `warm`
//! plugin's store serves several calls; [`begin_call`] resets its per-call state.

use std::sync::{Arc, Weak};

use tokio::sync::OwnedSemaphorePermit;
use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, Store, UpdateDeadline};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::exchange::Exchange;
use super::host_env::HostEnv;
use super::stdio::CappedOutput;
use super::{InvokeError, RuntimeInner};

/// The node-wide call slot a call runs under; given up while the call is
/// parked (see [`HostEnv::while_parked`]).
#[derive(Default)]
pub(crate) struct CallSlot {
    pub(crate) permit: Option<OwnedSemaphorePermit>,
    /// The call was parked and no slot came free again in time: it ends as
    /// overloaded at its next epoch tick instead of running without one.
    pub(crate) lost: bool,
}

/// What `host.log` has written in the current call.
#[derive(Default)]
pub(crate) struct LogBudget {
    pub(crate) lines: u32,
    pub(crate) bytes: usize,
    pub(crate) dropped: u32,
}

/// Store data of one call.
pub struct PluginState {
    wasi: WasiCtx,
    /// WASI's resources and the host's own (`llm` answers being read).
    pub(crate) table: ResourceTable,
    /// `wasi:http`: its limits, and the hooks that send a plugin's requests the host's way.
    pub(crate) http_ctx: wasmtime_wasi_http::WasiHttpCtx,
    pub(crate) http_hooks: super::http::PluginHttp,
    limiter: CallLimiter,
    pub(crate) plugin_name: Arc<str>,
    /// The plugin's key-value namespace (its install's identity); `None` while
    /// its manifest is read, when it has no key-value store at all.
    pub(crate) kv_namespace: Option<Arc<str>>,
    pub(crate) slot: CallSlot,
    pub(crate) log: LogBudget,
    /// What the host functions reach.
    pub(crate) host: Arc<HostEnv>,
    /// Only to run tools, which needs the registry; weak because a warm
    /// instance lives inside what the runtime owns. A call always runs under
    /// a live [`super::Runtime`], so this upgrades for as long as a call does.
    pub(crate) runtime: Weak<RuntimeInner>,
    pub(crate) exchange: Exchange,
    pub(crate) events_emitted: u32,
    /// Secrets this store's calls read (`config-get`), redacted from all they print.
    pub(crate) secrets_read: Vec<String>,
    ticks_used: u64,
    timed_out: bool,
    stdout: CappedOutput,
    stderr: CappedOutput,
}

impl WasiView for PluginState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Bounds one store's memory, tables and instances, and remembers a refusal
/// so a trap caused by it can be reported as what it was.
pub struct CallLimiter {
    max_memory: usize,
    max_table_elements: usize,
    pub memory_refused: bool,
}

impl ResourceLimiter for CallLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.max_memory {
            self.memory_refused = true;
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= self.max_table_elements)
    }

    fn instances(&self) -> usize {
        32
    }
    fn tables(&self) -> usize {
        32
    }
    fn memories(&self) -> usize {
        8
    }
}

pub(crate) fn new_store(
    runtime: &Arc<RuntimeInner>,
    plugin_name: Arc<str>,
    kv_namespace: Option<Arc<str>>,
    exchange: Exchange,
) -> Store<PluginState> {
    let config = &runtime.host.config;
    let stdout = CappedOutput::new(config.max_stdio_bytes);
    let stderr = CappedOutput::new(config.max_stdio_bytes);
    // Deny-all WASI: the components import it even when unused, but a plugin
    // gets no files, environment, arguments or sockets.
    let wasi = WasiCtx::builder()
        .stdout(stdout.clone())
        .stderr(stderr.clone())
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .build();
    let state = PluginState {
        wasi,
        table: ResourceTable::new(),
        http_ctx: wasmtime_wasi_http::WasiHttpCtx::new(),
        http_hooks: super::http::PluginHttp::new(plugin_name.clone(), Arc::downgrade(runtime)),
        limiter: CallLimiter {
            max_memory: (config.max_memory_mb as usize) << 20,
            max_table_elements: super::engine::MAX_TABLE_ELEMENTS,
            memory_refused: false,
        },
        plugin_name,
        kv_namespace,
        slot: CallSlot::default(),
        log: LogBudget::default(),
        host: runtime.host.clone(),
        runtime: Arc::downgrade(runtime),
        exchange,
        events_emitted: 0,
        secrets_read: Vec::new(),
        ticks_used: 0,
        timed_out: false,
        stdout,
        stderr,
    };
    let budget_ticks = config
        .call_timeout_ms
        .div_ceil(super::engine::EPOCH_TICK.as_millis() as u64)
        .max(1);
    let mut store = Store::new(&runtime.engine, state);
    store.limiter(|state| &mut state.limiter);
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |mut context| {
        let state = context.data_mut();
        if state.slot.lost {
            return Err(wasmtime::Error::msg(
                "no call slot came free after the call was parked",
            ));
        }
        state.ticks_used += 1;
        if state.ticks_used > budget_ticks {
            state.timed_out = true;
            return Err(wasmtime::Error::msg("plugin exceeded its execution time"));
        }
        Ok(UpdateDeadline::Yield(1))
    });
    store
}

/// Prepare a store for its next call: a warm store is reused, so everything
/// that is per call is reset here (see `warm.rs` for what is not).
pub(crate) fn begin_call(store: &mut Store<PluginState>, exchange: Exchange) {
    let state = store.data_mut();
    state.exchange = exchange;
    state.events_emitted = 0;
    state.log = LogBudget::default();
    state.slot = CallSlot::default();
    state.ticks_used = 0;
    state.timed_out = false;
    state.limiter.memory_refused = false;
    store.set_epoch_deadline(1);
}

/// Release what a finished call held: an idle warm store must not keep the
/// request's event channel open, nor its approver or history.
pub(crate) fn end_call(store: &mut Store<PluginState>) {
    let state = store.data_mut();
    state.exchange = Exchange::new();
    state.slot = CallSlot::default();
}

/// Turn how a call ended into the node's error, and copy the plugin's stdio to the log.
pub(crate) fn classify(store: &mut Store<PluginState>, error: wasmtime::Error) -> InvokeError {
    let state = store.data();
    if state.slot.lost {
        InvokeError::Overloaded
    } else if state.timed_out {
        InvokeError::Timeout
    } else if state.limiter.memory_refused {
        InvokeError::MemoryExceeded
    } else if error.is::<wasmtime::PoolConcurrencyLimitError>() {
        InvokeError::Overloaded
    } else {
        InvokeError::Trapped(format!("{error:#}"))
    }
}

pub(crate) fn drain_stdio(store: &Store<PluginState>) {
    let state = store.data();
    if state.log.dropped > 0 {
        tracing::warn!(target: "plugin", plugin = &*state.plugin_name, dropped = state.log.dropped, "host.log lines over this call's limit were dropped");
    }
    for (stream, output) in [("stdout", &state.stdout), ("stderr", &state.stderr)] {
        let (text, dropped) = output.take();
        if !text.is_empty() {
            let text = super::settings::redact(text.trim_end(), &state.secrets_read);
            tracing::info!(target: "plugin", plugin = &*state.plugin_name, stream, dropped, "{text}");
        }
    }
}
