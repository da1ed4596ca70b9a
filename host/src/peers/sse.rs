//! Server-sent events as the node's clients read them (A2A streams and MCP's
//! Streamable HTTP answers; the W3C event-stream format, as a2a-sdk's
//! `parse_sse_stream` reads it): `event:` names the event, `data:` lines join
//! with `\n`, a blank line ends the event, `:` lines are comments, `id:` and
//! `retry:` are ignored. Bytes arrive in arbitrary pieces; a line and an event
//! are each bounded, so a peer that never ends one cannot grow the client's
//! memory.

/// One complete event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// `message` unless the event named itself.
    pub name: String,
    pub data: String,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SseError {
    #[error("an event-stream line is over {0} bytes")]
    LineTooLong(usize),
    #[error("an event is over {0} bytes")]
    EventTooLarge(usize),
    #[error("the event stream is not UTF-8")]
    NotUtf8,
}

pub struct SseParser {
    max_line: usize,
    max_event: usize,
    line: Vec<u8>,
    /// The previous piece ended on `\r`; a `\n` opening this one belongs to it.
    after_cr: bool,
    name: Option<String>,
    data: Option<String>,
}

impl SseParser {
    pub fn new(max_line: usize, max_event: usize) -> SseParser {
        SseParser {
            max_line,
            max_event,
            line: Vec::new(),
            after_cr: false,
            name: None,
            data: None,
        }
    }

    /// Feed the next piece of the stream; the events it completes, in order.
    pub fn feed(&mut self, mut bytes: &[u8]) -> Result<Vec<SseEvent>, SseError> {
        let mut events = Vec::new();
        if self.after_cr && bytes.first() == Some(&b'\n') {
            bytes = &bytes[1..];
        }
        self.after_cr = false;
        while let Some(end) = bytes.iter().position(|b| *b == b'\n' || *b == b'\r') {
            self.extend_line(&bytes[..end])?;
            let line = std::mem::take(&mut self.line);
            if let Some(event) = self.take_line(&line)? {
                events.push(event);
            }
            let crlf = bytes[end] == b'\r' && bytes.get(end + 1) == Some(&b'\n');
            if bytes[end] == b'\r' && end + 1 == bytes.len() {
                self.after_cr = true;
            }
            bytes = &bytes[end + if crlf { 2 } else { 1 }..];
        }
        self.extend_line(bytes)?;
        Ok(events)
    }

    fn extend_line(&mut self, bytes: &[u8]) -> Result<(), SseError> {
        if self.line.len() + bytes.len() > self.max_line {
            return Err(SseError::LineTooLong(self.max_line));
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    fn take_line(&mut self, line: &[u8]) -> Result<Option<SseEvent>, SseError> {
        if line.is_empty() {
            let name = self.name.take();
            return Ok(self.data.take().map(|data| SseEvent {
                name: name.unwrap_or_else(|| "message".into()),
                data,
            }));
        }
        let line = std::str::from_utf8(line).map_err(|_| SseError::NotUtf8)?;
        if line.starts_with(':') {
            return Ok(None);
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => self.name = Some(value.to_string()),
            "data" => {
                let data = self.data.get_or_insert_with(String::new);
                let separator = usize::from(!data.is_empty());
                if data.len() + separator + value.len() > self.max_event {
                    return Err(SseError::EventTooLarge(self.max_event));
                }
                if separator == 1 {
                    data.push('\n');
                }
                data.push_str(value);
            }
            _ => {}
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(name: &str, data: &str) -> SseEvent {
        SseEvent {
            name: name.into(),
            data: data.into(),
        }
    }

    #[test]
    fn events_split_anywhere_come_out_whole() {
        let stream =
            b"data: {\"a\":1}\r\n\r\n: keep-alive\n\nevent: error\ndata: x\ndata:y\n\ndata: last\r\r";
        let whole = SseParser::new(1024, 1024).feed(stream).unwrap();
        let expected = vec![
            event("message", "{\"a\":1}"),
            event("error", "x\ny"),
            event("message", "last"),
        ];
        assert_eq!(whole, expected);
        for size in 1..stream.len() {
            let mut parser = SseParser::new(1024, 1024);
            let mut events = Vec::new();
            for piece in stream.chunks(size) {
                events.extend(parser.feed(piece).unwrap());
            }
            assert_eq!(events, expected, "pieces of {size} bytes");
        }
    }

    #[test]
    fn a_name_without_data_is_no_event_and_does_not_leak_into_the_next() {
        let events = SseParser::new(64, 64)
            .feed(b"event: error\n\ndata: ok\n\n")
            .unwrap();
        assert_eq!(events, vec![event("message", "ok")]);
    }

    #[test]
    fn lines_and_events_are_bounded() {
        let mut parser = SseParser::new(8, 64);
        assert_eq!(parser.feed(b"data: 12"), Ok(vec![]));
        assert_eq!(parser.feed(b"3"), Err(SseError::LineTooLong(8)));
        let mut parser = SseParser::new(64, 5);
        assert_eq!(
            parser.feed(b"data: 12\ndata: 345\n"),
            Err(SseError::EventTooLarge(5))
        );
        let mut parser = SseParser::new(64, 5);
        assert_eq!(
            parser.feed(b"data: 12\ndata: 3\n\n").unwrap(),
            vec![event("message", "12\n3")]
        );
        assert_eq!(
            SseParser::new(64, 64).feed(b"data: \xff\n"),
            Err(SseError::NotUtf8)
        );
    }
}
