//! The human log format (`log_format = "human"`): one event, one line, whatever
//! the event carries.
//!
//! Log messages and fields carry text the node does not control: a model
//! server's error answer, a plugin's stdout, stderr and `host.log` lines, values
//! a client sent. tracing-subscriber's human format writes them as they are, so
//! a line break in one starts what reads as a new log line of the node's own (a
//! forged "plugin loaded" or "approval granted"), and an ESC starts a terminal
//! control sequence. [`EscapedFields`] formats every field of every event and
//! span, the message included, as tracing-subscriber does, then writes each
//! control character of the result escaped (`\n`, `\r`, `\t`, `\u{1b}`): one
//! place, so no call site has to remember which of its values are untrusted.
//! The JSON format needs none of this: its strings escape control characters.
//!
//! [`recent`] keeps the last warnings and errors for the operator's console,
//! escaped the same way.
//!
//! The event's own parts (time, level, target, span names) are the node's
//! static text and keep their colours on a terminal; field names lose their
//! italics there, as any escape sequence inside the fields is written out.

pub mod recent;

use std::fmt;

use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::{DefaultFields, Writer};

/// tracing-subscriber's field format with every control character escaped.
#[derive(Debug, Default)]
pub struct EscapedFields {
    plain: DefaultFields,
}

impl<'writer> FormatFields<'writer> for EscapedFields {
    fn format_fields<R: RecordFields>(&self, mut writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut escaping = EscapeControls { inner: &mut writer };
        self.plain.format_fields(Writer::new(&mut escaping), fields)
    }
}

/// Writes through to `inner` with the characters [`breaks_the_line`] finds
/// replaced by their escapes.
struct EscapeControls<'a, W: fmt::Write> {
    inner: &'a mut W,
}

impl<W: fmt::Write> fmt::Write for EscapeControls<'_, W> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        let mut rest = text;
        while let Some((at, control)) = rest.char_indices().find(|&(_, c)| breaks_the_line(c)) {
            self.inner.write_str(&rest[..at])?;
            write_escape(self.inner, control)?;
            rest = &rest[at + control.len_utf8()..];
        }
        self.inner.write_str(rest)
    }
}

/// Whether `c` can end a line or drive a terminal: the C0 controls (line
/// feed, carriage return, ESC, ...), DEL, the C1 controls (NEL and the 8-bit
/// CSI among them) and Unicode's line and paragraph separators, which some log
/// viewers break lines at.
fn breaks_the_line(c: char) -> bool {
    c.is_control() || matches!(c, '\u{2028}' | '\u{2029}')
}

fn write_escape(out: &mut impl fmt::Write, control: char) -> fmt::Result {
    match control {
        '\n' => out.write_str("\\n"),
        '\r' => out.write_str("\\r"),
        '\t' => out.write_str("\\t"),
        other => write!(out, "\\u{{{:x}}}", u32::from(other)),
    }
}

#[cfg(test)]
mod tests {
    use std::fmt::Write as _;
    use std::io;
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;

    use super::*;

    fn escaped(text: &str) -> String {
        let mut out = String::new();
        EscapeControls { inner: &mut out }
            .write_str(text)
            .expect("a String takes any text");
        out
    }

    #[test]
    fn line_breaks_and_terminal_controls_are_escaped() {
        assert_eq!(escaped("ok\nINFO forged\r\n"), "ok\\nINFO forged\\r\\n");
        assert_eq!(escaped("\u{1b}[31mred\u{1b}[0m"), "\\u{1b}[31mred\\u{1b}[0m");
        assert_eq!(escaped("a\tb\0c\u{7}d\u{7f}"), "a\\tb\\u{0}c\\u{7}d\\u{7f}");
        assert_eq!(
            escaped("nel\u{85}csi\u{9b}ls\u{2028}ps\u{2029}"),
            "nel\\u{85}csi\\u{9b}ls\\u{2028}ps\\u{2029}"
        );
    }

    #[test]
    fn other_text_is_written_as_it_is() {
        for text in ["", "plain", "quote \" backslash \\n é 漢字 🦀", "\\u{1b}"] {
            assert_eq!(escaped(text), text);
        }
    }

    /// What a subscriber using [`EscapedFields`] writes, kept for reading back.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.lock().expect("not poisoned").extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Captured {
        type Writer = Captured;
        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    #[test]
    fn an_event_with_hostile_message_fields_and_span_is_one_line() {
        let captured = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(captured.clone())
            .with_ansi(false)
            .fmt_fields(EscapedFields::default())
            .finish();
        let forged = "model down\n2026-01-01T00:00:00Z  INFO agora_node: approval granted";
        let error = std::io::Error::other(forged);
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("call", plugin = %forged);
            let _entered = span.enter();
            tracing::warn!(text = %forged, debugged = ?forged, plain = forged, error = &error as &dyn std::error::Error, "said {forged}");
        });
        let text = String::from_utf8(captured.0.lock().expect("not poisoned").clone()).expect("UTF-8");
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(!text.contains("\n2026"), "{text}");
        let escaped_line = "model down\\n2026-01-01T00:00:00Z  INFO agora_node: approval granted";
        for field in [
            format!("said {escaped_line}"),
            format!("text={escaped_line}"),
            format!("plugin={escaped_line}"),
            format!("error={escaped_line}"),
        ] {
            assert!(text.contains(&field), "{field:?} not in {text}");
        }
    }
}
