//! An answer a plugin streams as chunks (`emit("chunk", …)`), assembled for a
//! transport that forwards each chunk and marks the last one (HAI's
//! `is_final`, A2A's `lastChunk`): only when the plugin returns is it known
//! which chunk was last, so the latest one is always held back.

/// What an assistant's reply states as its answer: its `content`, or the
/// reply itself when it is a bare string (JSON or not); empty when neither.
pub fn stated_answer(reply: &str) -> String {
    let reply: serde_json::Value =
        serde_json::from_str(reply).unwrap_or_else(|_| serde_json::Value::String(reply.into()));
    reply["content"]
        .as_str()
        .or_else(|| reply.as_str())
        .unwrap_or_default()
        .to_string()
}

pub struct ChunkedAnswer {
    text: String,
    held: Option<String>,
    max_bytes: usize,
}

/// A chunk that would take the answer past its limit; it was dropped.
#[derive(Debug)]
pub struct OverLimit;

impl ChunkedAnswer {
    pub fn new(max_bytes: usize) -> ChunkedAnswer {
        ChunkedAnswer {
            text: String::new(),
            held: None,
            max_bytes,
        }
    }

    /// Add a chunk: the one held before it, now known not to be the last, is
    /// returned to be sent. Empty chunks are ignored.
    pub fn push(&mut self, content: &str) -> Result<Option<String>, OverLimit> {
        if content.is_empty() {
            return Ok(None);
        }
        if self.text.len() + content.len() > self.max_bytes {
            return Err(OverLimit);
        }
        self.text.push_str(content);
        Ok(self.held.replace(content.to_string()))
    }

    /// The chunk held back, to be sent now (as the last one, or before a pause).
    pub fn take_held(&mut self) -> Option<String> {
        self.held.take()
    }

    /// The whole answer so far.
    pub fn text(&self) -> &str {
        &self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_chunk_is_released_by_the_next_and_the_last_stays_held() {
        let mut answer = ChunkedAnswer::new(8);
        assert_eq!(answer.push("ab").unwrap(), None);
        assert_eq!(answer.push("").unwrap(), None);
        assert_eq!(answer.push("cd").unwrap().as_deref(), Some("ab"));
        assert!(answer.push("efghi").is_err(), "over the limit");
        assert_eq!(answer.text(), "abcd");
        assert_eq!(answer.take_held().as_deref(), Some("cd"));
        assert_eq!(answer.take_held(), None);
    }
}
