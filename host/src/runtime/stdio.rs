//! A plugin's stdout and stderr: kept in memory up to a cap, then dropped, and
//! copied to the node's log after each call. A chatty plugin never fails a
//! request and never grows the node's memory.

use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError};

#[derive(Clone)]
pub struct CappedOutput {
    capacity: usize,
    buffer: Arc<Mutex<(BytesMut, usize)>>,
}

impl CappedOutput {
    pub fn new(capacity: usize) -> Self {
        CappedOutput {
            capacity,
            buffer: Arc::new(Mutex::new((BytesMut::new(), 0))),
        }
    }

    /// What was kept, and how many bytes were dropped past the cap.
    pub fn take(&self) -> (String, usize) {
        let mut guard = self
            .buffer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let (bytes, dropped) = std::mem::take(&mut *guard);
        (String::from_utf8_lossy(&bytes).into_owned(), dropped)
    }

    fn push(&self, bytes: &[u8]) {
        let mut guard = self
            .buffer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let room = self.capacity.saturating_sub(guard.0.len());
        let kept = room.min(bytes.len());
        guard.0.extend_from_slice(&bytes[..kept]);
        guard.1 += bytes.len() - kept;
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for CappedOutput {
    async fn ready(&mut self) {}
}

impl OutputStream for CappedOutput {
    fn write(&mut self, bytes: Bytes) -> Result<(), StreamError> {
        self.push(&bytes);
        Ok(())
    }
    fn flush(&mut self) -> Result<(), StreamError> {
        Ok(())
    }
    fn check_write(&mut self) -> Result<usize, StreamError> {
        Ok(64 * 1024)
    }
}

impl tokio::io::AsyncWrite for CappedOutput {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.push(buf);
        std::task::Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

impl IsTerminal for CappedOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CappedOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}
