//! The accepted socket: it holds its connection permit, and it closes lingering.
//!
//! When the node ends a connection while the client is still sending (headers
//! over `http.max_header_bytes`, a body refused beyond the discard bounds, an
//! idle keep-alive timing out mid-request), closing the socket with unread bytes
//! in its receive buffer makes the kernel answer with a reset instead of a FIN.
//! The reset races the refusal the node just wrote: the client gets `EPIPE` on
//! its write or `ECONNRESET` on its read, and never sees the 431 or 413.
//!
//! So a connection is closed the way Apache's "lingering close" does it: shut the
//! write side (the client sees the reply, then end of stream), then read and
//! throw away what the client still sends until it closes, within
//! `http.discard_body_bytes` and `http.discard_timeout_ms`. The permit is held
//! until then, because the file descriptor is open until then: a client that
//! never closes cannot get more lingering sockets than the connection caps allow.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

use super::caps::ConnectionPermit;

/// How much a closing connection still reads, and for how long.
#[derive(Clone, Copy, Debug)]
pub struct Linger {
    pub max_bytes: u64,
    pub timeout: Duration,
}

/// A socket that holds its connection permit until it is closed, lingering.
pub struct Counted {
    /// `Some` for the socket's whole life; `Drop` takes it to linger.
    stream: Option<TcpStream>,
    permit: Option<ConnectionPermit>,
    linger: Linger,
}

impl Counted {
    pub fn new(stream: TcpStream, permit: ConnectionPermit, linger: Linger) -> Counted {
        Counted {
            stream: Some(stream),
            permit: Some(permit),
            linger,
        }
    }

    fn stream(&mut self) -> Pin<&mut TcpStream> {
        match self.stream.as_mut() {
            Some(stream) => Pin::new(stream),
            None => unreachable!("the stream is taken only when the socket is dropped"),
        }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        let (Some(stream), Ok(runtime)) = (self.stream.take(), tokio::runtime::Handle::try_current()) else {
            return;
        };
        runtime.spawn(close_lingering(stream, self.permit.take(), self.linger));
    }
}

async fn close_lingering(mut stream: TcpStream, permit: Option<ConnectionPermit>, linger: Linger) {
    // hyper may have shut the write side already; doing it again is harmless.
    let _ = stream.shutdown().await;
    let deadline = tokio::time::Instant::now() + linger.timeout;
    let mut scratch = [0u8; 8192];
    let mut discarded = 0u64;
    while discarded < linger.max_bytes {
        match tokio::time::timeout_at(deadline, stream.read(&mut scratch)).await {
            Ok(Ok(read)) if read > 0 => discarded += read as u64,
            // End of stream, an error, or the deadline: done.
            _ => break,
        }
    }
    drop(stream);
    drop(permit);
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        self.stream().poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.stream().poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        self.stream().poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream
            .as_ref()
            .is_some_and(|stream| stream.is_write_vectored())
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.stream().poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.stream().poll_shutdown(cx)
    }
}
