//! The node's default Agora plugin: it answers requests that name no protocol
//! (spec §6.1, `protocolHash` absent or null) in plain language. It is
//! rule-based, with no language model: greetings, help, arithmetic, the date
//! and time, unit conversions through the `convert_units` tool when a plugin
//! offers it, and, in a multi-round conversation, what was said earlier (read
//! through `host::history()`).

use agora_plugin_sdk::prelude::*;

struct AgoraAssistant;

/// The longest message the assistant reads; longer ones are answered briefly.
const MAX_MESSAGE_CHARS: usize = 4000;

impl Plugin for AgoraAssistant {
    fn manifest() -> Manifest {
        Manifest::new("agora-assistant", env!("CARGO_PKG_VERSION"))
            .description("Answers Agora requests without a protocol in plain language (rule-based)")
            .default_agora()
    }

    fn handle(message: Message) -> Result<String, Failure> {
        let text = match serde_json::from_str::<Value>(&message.body) {
            Ok(Value::String(text)) => text,
            Ok(Value::Object(fields)) => match fields.get("message").or(fields.get("text")) {
                Some(Value::String(text)) => text.clone(),
                _ => {
                    return reply(
                        "I read plain-language messages: send a string, or an object with a \"message\" field.",
                    );
                }
            },
            _ => return reply("I read plain-language messages."),
        };
        reply(answer(&text, message.conversation.is_some()))
    }
}

fn answer(text: &str, in_conversation: bool) -> String {
    if text.chars().count() > MAX_MESSAGE_CHARS {
        return format!("That message is too long for me; I read at most {MAX_MESSAGE_CHARS} characters.");
    }
    let lower = text.trim().to_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !c.is_alphanumeric() && c != '\'')
        .filter(|w| !w.is_empty())
        .collect();
    let has = |word: &str| words.contains(&word);

    if let Some(name) = stated_name(text) {
        return format!("Nice to meet you, {name}. I will remember your name for this conversation.");
    }
    if lower.contains("my name") && (lower.contains("what") || lower.contains('?')) {
        return recall_name(in_conversation);
    }
    if lower.contains("what did i say") || lower.contains("what did i ask") {
        return recall_last(in_conversation);
    }
    if let Some(conversion) = conversion(&lower) {
        return conversion;
    }
    if let Some(expression) = arithmetic(&lower) {
        return expression;
    }
    if has("time") || has("date") || has("today") || lower.contains("what day") {
        return format!("It is {} (UTC).", format_utc(host::now_ms()));
    }
    if has("weather") || has("temperature") || has("forecast") {
        return "I have no weather source, so I cannot tell you the weather. I can do arithmetic, \
                unit conversions and tell the time."
            .into();
    }
    if has("help") || lower.contains("what can you do") {
        return help();
    }
    if ["hello", "hi", "hey", "greetings", "morning", "evening"]
        .iter()
        .any(|w| has(w))
    {
        let mut reply = "Hello! I am the assistant of this Agora node.".to_string();
        if in_conversation {
            reply.push_str(" This is a multi-round conversation: ask me anything, one message at a time.");
        } else {
            reply.push_str(" Ask me for help to see what I can do.");
        }
        return reply;
    }
    if has("thanks") || has("thank") {
        return "You are welcome.".into();
    }
    if has("bye") || has("goodbye") {
        return "Goodbye!".into();
    }
    format!(
        "I did not understand {:?}. {}",
        text.trim().chars().take(120).collect::<String>(),
        help()
    )
}

fn help() -> String {
    "I can greet you, compute arithmetic (\"what is 2 + 3 * 4\"), convert units \
     (\"convert 5 km to mi\"), tell the date and time, and in a multi-round conversation \
     remember your name (\"my name is Ada\") and what you said."
        .into()
}

/// "my name is X" / "I am X" / "call me X".
fn stated_name(text: &str) -> Option<String> {
    let lower = text.to_lowercase();
    let start = ["my name is ", "call me ", "i'm ", "i am "]
        .iter()
        .find_map(|prefix| lower.find(prefix).map(|at| at + prefix.len()))?;
    let name: String = text
        .get(start..)?
        .split(|c: char| !(c.is_alphanumeric() || c == '-' || c == '\''))
        .next()?
        .to_string();
    let looks_like_a_name = name.chars().next().is_some_and(char::is_alphabetic)
        && !["not", "a", "an", "the", "fine", "good", "here", "asking"]
            .contains(&name.to_lowercase().as_str());
    looks_like_a_name.then_some(name)
}

fn recall_name(in_conversation: bool) -> String {
    if !in_conversation {
        return "I only remember things within a multi-round conversation.".into();
    }
    let said = match user_messages() {
        Ok(said) => said,
        Err(error) => return cannot_recall(error),
    };
    let name = said
        .iter()
        .rev()
        .find_map(|body| body.as_str().and_then(stated_name));
    match name {
        Some(name) => format!("Your name is {name}."),
        None => "You have not told me your name yet.".into(),
    }
}

fn recall_last(in_conversation: bool) -> String {
    if !in_conversation {
        return "I only remember things within a multi-round conversation.".into();
    }
    let said: Vec<String> = match user_messages() {
        Ok(said) => said
            .into_iter()
            .map(|body| match body {
                Value::String(text) => text,
                other => other.to_string(),
            })
            .collect(),
        Err(error) => return cannot_recall(error),
    };
    match said.last() {
        Some(last) => format!(
            "You have sent {} earlier message(s); the last one was {last:?}.",
            said.len()
        ),
        None => "This is your first message.".into(),
    }
}

/// The bodies of the sender's earlier messages in this conversation, oldest first.
fn user_messages() -> Result<Vec<Value>, HostError> {
    Ok(host::history()?
        .into_iter()
        .filter(|entry| entry.role == "user")
        .map(|entry| entry.body)
        .collect())
}

fn cannot_recall(error: HostError) -> String {
    format!("I cannot read our conversation's history: {error}")
}

/// "convert 5 km to mi", "5 kg in lb", "how many ft is 3 m" (first form only for the latter).
fn conversion(lower: &str) -> Option<String> {
    let tokens: Vec<&str> = lower
        .trim_end_matches(['?', '.', '!'])
        .split_whitespace()
        .collect();
    let at = tokens
        .windows(4)
        .position(|w| w[0].parse::<f64>().is_ok() && matches!(w[2], "to" | "in" | "into"))?;
    let value: f64 = tokens[at].parse().ok()?;
    // Unit symbols are case-sensitive in unit-conversion.md; restore the common ones.
    let unit = |symbol: &str| -> String {
        match symbol {
            "c" => "C",
            "f" => "F",
            "k" => "K",
            "kb" => "kB",
            "mb" => "MB",
            "gb" => "GB",
            "kib" => "KiB",
            "mib" => "MiB",
            "gib" => "GiB",
            "b" => "B",
            other => other,
        }
        .to_string()
    };
    let (from, to) = (unit(tokens[at + 1]), unit(tokens[at + 3]));
    let arguments = json!({"value": value, "from": from, "to": to});
    Some(match host::call_tool("convert_units", &arguments) {
        Ok(result) => {
            let converted = serde_json::from_str::<Value>(&result)
                .ok()
                .and_then(|v| v.get("value").and_then(Value::as_f64));
            match converted {
                Some(converted) => format!("{value} {from} is {converted} {to}."),
                None => format!("The converter answered {result}."),
            }
        }
        Err(error) => format!("I cannot convert {from} to {to}: {error}"),
    })
}

/// "what is 2 + 3 * (4 - 1)", "calculate 7/2", or a bare expression.
fn arithmetic(lower: &str) -> Option<String> {
    let mut expression = lower.trim().trim_end_matches(['?', '!', '.']).trim();
    for prefix in ["what is", "what's", "calculate", "compute", "how much is"] {
        if let Some(rest) = expression.strip_prefix(prefix) {
            expression = rest.trim();
        }
    }
    let has_digit = expression.chars().any(|c| c.is_ascii_digit());
    let only_math = expression
        .chars()
        .all(|c| c.is_ascii_digit() || " .+-*/()^%".contains(c));
    if !has_digit || !only_math {
        return None;
    }
    Some(match Parser::new(expression).evaluate() {
        Ok(value) => format!("{expression} = {}", format_number(value)),
        Err(problem) => format!("I cannot compute {expression:?}: {problem}."),
    })
}

fn format_number(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{}", value as i64)
    } else {
        format!("{}", (value * 1e10).round() / 1e10)
    }
}

/// A recursive-descent evaluator for + - * / % ^ and parentheses, bounded in depth.
struct Parser<'a> {
    bytes: &'a [u8],
    at: usize,
    depth: u32,
}

impl<'a> Parser<'a> {
    fn new(text: &'a str) -> Self {
        Parser {
            bytes: text.as_bytes(),
            at: 0,
            depth: 0,
        }
    }

    fn evaluate(mut self) -> Result<f64, String> {
        let value = self.sum()?;
        self.skip_spaces();
        if self.at != self.bytes.len() {
            return Err(format!("unexpected {:?}", self.bytes[self.at] as char));
        }
        if !value.is_finite() {
            return Err("the result is not a finite number".into());
        }
        Ok(value)
    }

    fn skip_spaces(&mut self) {
        while self.bytes.get(self.at) == Some(&b' ') {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_spaces();
        self.bytes.get(self.at).copied()
    }

    fn sum(&mut self) -> Result<f64, String> {
        let mut value = self.product()?;
        while let Some(op @ (b'+' | b'-')) = self.peek() {
            self.at += 1;
            let rhs = self.product()?;
            value = if op == b'+' { value + rhs } else { value - rhs };
        }
        Ok(value)
    }

    fn product(&mut self) -> Result<f64, String> {
        let mut value = self.power()?;
        while let Some(op @ (b'*' | b'/' | b'%')) = self.peek() {
            self.at += 1;
            let rhs = self.power()?;
            value = match op {
                b'*' => value * rhs,
                _ if rhs == 0.0 => return Err("division by zero".into()),
                b'/' => value / rhs,
                _ => value % rhs,
            };
        }
        Ok(value)
    }

    fn power(&mut self) -> Result<f64, String> {
        let base = self.unary()?;
        if self.peek() == Some(b'^') {
            self.at += 1;
            let exponent = self.power()?;
            return Ok(base.powf(exponent));
        }
        Ok(base)
    }

    fn unary(&mut self) -> Result<f64, String> {
        match self.peek() {
            Some(b'-') => {
                self.at += 1;
                self.nested(|p| p.unary()).map(|v| -v)
            }
            Some(b'(') => {
                self.at += 1;
                let value = self.nested(|p| p.sum())?;
                if self.peek() != Some(b')') {
                    return Err("a '(' is not closed".into());
                }
                self.at += 1;
                Ok(value)
            }
            _ => self.number(),
        }
    }

    fn nested(&mut self, inner: impl FnOnce(&mut Self) -> Result<f64, String>) -> Result<f64, String> {
        self.depth += 1;
        if self.depth > 64 {
            return Err("the expression nests too deeply".into());
        }
        let value = inner(self);
        self.depth -= 1;
        value
    }

    fn number(&mut self) -> Result<f64, String> {
        self.skip_spaces();
        let start = self.at;
        while self
            .bytes
            .get(self.at)
            .is_some_and(|b| b.is_ascii_digit() || *b == b'.')
        {
            self.at += 1;
        }
        std::str::from_utf8(&self.bytes[start..self.at])
            .ok()
            .and_then(|text| text.parse::<f64>().ok())
            .ok_or_else(|| "a number is missing".to_string())
    }
}

/// `YYYY-MM-DD HH:MM:SS` for milliseconds since the Unix epoch (civil-from-days, proleptic Gregorian).
fn format_utc(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rest) = ((secs / 86400) as i64, secs % 86400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

export_plugin!(AgoraAssistant);
