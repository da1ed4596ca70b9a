//! The call path: a transport's [`Call`] becomes one `handle` of the plugin,
//! in a fresh instance or one leased from its warm pool, under a node-wide
//! call slot; how it ended becomes the reply or an [`InvokeError`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::Instance;

use super::bindings;
use super::exchange::Exchange;
use super::instance::{self, PluginState};
use super::{Call, InvokeError, LoadedPlugin, Runtime, warm};

/// Where one call runs: a fresh instance, or one leased from the plugin's warm pool.
pub(super) enum CallInstance {
    /// A fresh instance: its export is type-checked when called ([`bindings::CallExports`]).
    Fresh(wasmtime::Store<PluginState>, Instance),
    /// A warm instance was loaded with every export checked once, when it was made.
    Warm(warm::Lease),
}

impl CallInstance {
    pub(super) fn store(&mut self) -> &mut wasmtime::Store<PluginState> {
        match self {
            CallInstance::Fresh(store, _) => store,
            CallInstance::Warm(lease) => &mut lease.instance.store,
        }
    }

    async fn call_handle(
        &mut self,
        exports: &bindings::CallExports,
        message: &bindings::Message,
    ) -> wasmtime::Result<Result<String, bindings::Failure>> {
        match self {
            CallInstance::Fresh(store, instance) => exports.call_handle(store, instance, message).await,
            CallInstance::Warm(lease) => {
                let warm = &mut lease.instance;
                warm.plugin.call_handle(&mut warm.store, message).await
            }
        }
    }

    pub(super) async fn call_run_tool(
        &mut self,
        exports: &bindings::CallExports,
        name: &str,
        arguments: &str,
    ) -> wasmtime::Result<Result<String, String>> {
        match self {
            CallInstance::Fresh(store, instance) => {
                exports.call_run_tool(store, instance, name, arguments).await
            }
            CallInstance::Warm(lease) => {
                let warm = &mut lease.instance;
                warm.plugin.call_run_tool(&mut warm.store, name, arguments).await
            }
        }
    }

    /// `prompts.get`: `Ok(None)` when the component has no such export.
    pub(super) async fn call_get_prompt(
        &mut self,
        exports: &bindings::CallExports,
        name: &str,
        arguments: &str,
    ) -> wasmtime::Result<Option<Result<String, String>>> {
        match self {
            CallInstance::Fresh(store, instance) => {
                exports.call_get_prompt(store, instance, name, arguments).await
            }
            CallInstance::Warm(lease) => {
                let warm = &mut lease.instance;
                exports
                    .call_get_prompt(&mut warm.store, &warm.instance, name, arguments)
                    .await
            }
        }
    }
}

impl Runtime {
    /// Run one call on `plugin`: in a fresh instance, or a warm one if its manifest asks.
    pub async fn invoke(
        &self,
        plugin: &Arc<LoadedPlugin>,
        call: Call,
        exchange: Exchange,
    ) -> Result<String, InvokeError> {
        let started = Instant::now();
        let transport = call.transport;
        let result = self.invoke_inner(plugin, call, exchange).await;
        self.inner.metrics.observe_call(
            transport.as_str(),
            &plugin.manifest.name,
            &result,
            started.elapsed(),
        );
        result
    }

    async fn invoke_inner(
        &self,
        plugin: &Arc<LoadedPlugin>,
        call: Call,
        mut exchange: Exchange,
    ) -> Result<String, InvokeError> {
        exchange.caller_transport.get_or_insert(call.transport.as_str());
        let message = bindings::Message {
            transport: call.transport.into(),
            phase: call.phase.into(),
            route: call.route,
            sender: call.sender,
            conversation: call.conversation,
            body: call.body,
        };
        let mut call_instance = self.call_instance(plugin, exchange).await?;
        let outcome = call_instance.call_handle(&plugin.exports, &message).await;
        let store = call_instance.store();
        instance::drain_stdio(store);
        let result = match outcome {
            Ok(Ok(reply)) => self.check_output(reply),
            Ok(Err(failure)) => Err(InvokeError::Failure {
                kind: failure.kind.into(),
                // A failure's message reaches the client: never with a secret the call read.
                message: super::settings::redact(&failure.message, &store.data().secrets_read).into_owned(),
            }),
            Err(error) => Err(instance::classify(store, error)),
        };
        // A typed failure is an answer; anything else may have left the instance broken.
        let clean = matches!(result, Ok(_) | Err(InvokeError::Failure { .. }));
        self.release(plugin, call_instance, clean);
        result
    }

    /// An instance for one call, and the node-wide call slot it runs under. A
    /// warm plugin waits for a place in its own pool before taking a node-wide
    /// slot, so a busy warm plugin does not hold slots other plugins need.
    pub(super) async fn call_instance(
        &self,
        plugin: &Arc<LoadedPlugin>,
        exchange: Exchange,
    ) -> Result<CallInstance, InvokeError> {
        let name = plugin.manifest.name.as_str();
        let call_instance = if let Some(pool) = &plugin.warm {
            let queue_timeout = Duration::from_millis(self.inner.host.config.queue_timeout_ms);
            let place = pool.reserve(queue_timeout).await?;
            let slot = self.inner.host.call_slot().await?;
            let lease = pool
                .check_out(place, &self.inner, &plugin.pre, name, exchange)
                .await?;
            let mut call_instance = CallInstance::Warm(lease);
            // The slot lives in the store: a parked call gives it up and takes one again there.
            call_instance.store().data_mut().slot.permit = Some(slot);
            call_instance
        } else {
            let slot = self.inner.host.call_slot().await?;
            let mut store =
                instance::new_store(&self.inner, Arc::from(name), Some(Arc::from(name)), exchange);
            store.data_mut().slot.permit = Some(slot);
            match plugin.pre.instance_pre().instantiate_async(&mut store).await {
                Ok(instance) => CallInstance::Fresh(store, instance),
                Err(error) => return Err(instance::classify(&mut store, error)),
            }
        };
        Ok(call_instance)
    }

    /// After a call: a warm instance whose call ended cleanly goes back to its
    /// pool; everything else is dropped, returning its pooled slot.
    pub(super) fn release(&self, plugin: &LoadedPlugin, call_instance: CallInstance, clean: bool) {
        if let (CallInstance::Warm(lease), Some(pool), true) = (call_instance, &plugin.warm, clean) {
            pool.check_in(lease);
        }
    }

    pub(super) fn check_output(&self, reply: String) -> Result<String, InvokeError> {
        let limit = self.inner.host.config.max_output_bytes;
        if reply.len() > limit {
            return Err(InvokeError::OutputTooLarge {
                size: reply.len(),
                limit,
            });
        }
        Ok(reply)
    }
}
