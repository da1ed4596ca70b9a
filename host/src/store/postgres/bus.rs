//! The fleet bus: what one node publishes, every other node sharing the
//! database receives.
//!
//! `publish` inserts the message into `fleet_messages` and, in the same
//! statement, `pg_notify`s its id on the `agora_fleet` channel (NOTIFY's own
//! payload is capped at 8000 bytes; the row is not). Each node keeps one
//! dedicated connection outside the pool that `LISTEN`s; a notification only
//! wakes it, and it then reads every row past what it has seen, so
//! notifications that coalesce or arrive out of order lose nothing. Its own
//! messages (same `origin`) are skipped. When the database goes away the
//! listener reconnects with backoff (100 ms doubling to 5 s) and reads what it
//! missed.
//!
//! Delivery guarantee: every message published by another node while this one
//! runs is delivered once, in id order, provided the listener reads it within
//! the 60 s the sweep keeps it (a node cut off for longer loses what was swept
//! meanwhile) and the subscriber keeps within the broadcast's 1024 messages
//! (a slower one gets `Lagged`). A message whose publishing statement commits
//! more than [`GAP_GRACE`] after a message with a higher id was already read is
//! skipped: ids are taken at insert, not at commit, so a gap below a read id
//! is waited for that long, then taken for a rolled-back publish.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Mutex, broadcast, mpsc};
use tokio_postgres::{AsyncMessage, Client, Config, Connection, Socket};

use super::{db_error, tls};
use crate::store::Result;
use crate::store::backend::FleetMessage;

pub(super) const CHANNEL: &str = "agora_fleet";

/// How long a missing id below a read one is waited for.
pub(super) const GAP_GRACE: Duration = Duration::from_secs(10);

const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// While gaps are open, how often the table is read without a notification.
const GAP_POLL: Duration = Duration::from_millis(500);

/// Otherwise: a safety net, should a notification ever go missing.
const IDLE_POLL: Duration = Duration::from_secs(5);

/// The listener's position: every id up to `watermark` is handled; `read`
/// holds the ids above it already delivered (or skipped as our own), with when.
struct Position {
    watermark: i64,
    read: BTreeMap<i64, Instant>,
}

impl Position {
    fn mark(&mut self, id: i64, now: Instant) {
        self.read.insert(id, now);
    }

    /// Move the watermark over contiguous ids, and over gaps older than the grace.
    fn advance(&mut self, now: Instant) {
        while let Some((&id, &at)) = self.read.first_key_value() {
            if id == self.watermark + 1 || now.duration_since(at) >= GAP_GRACE {
                self.watermark = id;
                self.read.remove(&id);
            } else {
                break;
            }
        }
    }
}

pub(super) struct Listener {
    pub config: Config,
    /// The pool's connector: the bus connection is verified the same way.
    pub tls: tls::Connector,
    pub origin: uuid::Uuid,
    pub sender: broadcast::Sender<FleetMessage>,
    /// Held by a test to keep the listener from reconnecting.
    pub gate: Arc<Mutex<()>>,
}

impl Listener {
    /// Run until the backend aborts the task (when it is dropped).
    pub async fn run(self, watermark: i64) {
        let mut position = Position {
            watermark,
            read: BTreeMap::new(),
        };
        let mut backoff = FIRST_BACKOFF;
        loop {
            let connected = {
                let _open = self.gate.lock().await;
                self.config.connect(self.tls.clone()).await
            };
            if let Ok((client, connection)) = connected {
                backoff = FIRST_BACKOFF;
                self.serve(&client, connection, &mut position).await;
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// Listen and deliver until the connection is lost.
    async fn serve(
        &self,
        client: &Client,
        mut connection: Connection<Socket, tls::Stream>,
        position: &mut Position,
    ) {
        // The connection delivers notifications only while polled: a task
        // drives it and turns each into a wake-up.
        let (wake, mut woken) = mpsc::unbounded_channel::<()>();
        let driver = tokio::spawn(async move {
            while let Some(message) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                match message {
                    Ok(AsyncMessage::Notification(_)) => {
                        if wake.send(()).is_err() {
                            break;
                        }
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
        });
        let _lost: Result<()> = async {
            client
                .batch_execute(&format!("LISTEN {CHANNEL}"))
                .await
                .map_err(db_error)?;
            // After LISTEN: whatever was published before it is read here,
            // whatever after it also notifies.
            loop {
                self.read_new(client, position).await?;
                let wait = if position.read.is_empty() {
                    IDLE_POLL
                } else {
                    GAP_POLL
                };
                match tokio::time::timeout(wait, woken.recv()).await {
                    Ok(Some(())) => while woken.try_recv().is_ok() {},
                    Ok(None) => return Ok(()),
                    Err(_) => {}
                }
            }
        }
        .await;
        driver.abort();
    }

    /// Deliver every row past the position that is not ours.
    async fn read_new(&self, client: &Client, position: &mut Position) -> Result<()> {
        let read: Vec<i64> = position.read.keys().copied().collect();
        let rows = client
            .query(
                "SELECT id, origin = $2::text::uuid, topic, payload FROM fleet_messages
                 WHERE id > $1 AND NOT (id = ANY($3)) ORDER BY id",
                &[&position.watermark, &self.origin.to_string(), &read],
            )
            .await
            .map_err(db_error)?;
        let now = Instant::now();
        for row in rows {
            let id: i64 = row.get(0);
            let own: bool = row.get(1);
            if !own {
                let payload: Vec<u8> = row.get(3);
                // No receiver now is not an error: nobody subscribed yet.
                let _ = self.sender.send(FleetMessage {
                    topic: row.get(2),
                    payload: payload.into(),
                });
            }
            position.mark(id, now);
        }
        position.advance(now);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(watermark: i64) -> Position {
        Position {
            watermark,
            read: BTreeMap::new(),
        }
    }

    #[test]
    fn the_watermark_waits_at_a_gap_until_it_is_filled() {
        let now = Instant::now();
        let mut position = at(4);
        position.mark(5, now);
        position.mark(7, now);
        position.advance(now);
        assert_eq!(position.watermark, 5);
        assert_eq!(position.read.keys().copied().collect::<Vec<_>>(), vec![7]);
        position.mark(6, now);
        position.advance(now);
        assert_eq!(position.watermark, 7);
        assert!(position.read.is_empty());
    }

    #[test]
    fn a_gap_older_than_the_grace_is_taken_for_a_rolled_back_publish() {
        let read_at = Instant::now();
        let mut position = at(4);
        position.mark(6, read_at);
        position.mark(7, read_at);
        position.advance(read_at + GAP_GRACE / 2);
        assert_eq!(position.watermark, 4);
        position.advance(read_at + GAP_GRACE);
        assert_eq!(position.watermark, 7);
        assert!(position.read.is_empty());
    }
}
