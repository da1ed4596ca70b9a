//! JSON-RPC 2.0 (jsonrpc.org/specification), once for every protocol that
//! rides on it — A2A and MCP, as server and as client.
//!
//! What is JSON-RPC's own lives here: the envelope (`"jsonrpc": "2.0"`, ids,
//! `params`, `result`/`error`), the reserved error codes, and how one inbound
//! body is classified. What differs between the protocols is a [`Dialect`]:
//! A2A (a2a-sdk 1.3.0's server) reads a missing id as a request with a null id
//! and accepts positional params, MCP (since 2025-06-18) has notifications and
//! responses from the client but only named params. Neither takes batches.
//! Each transport maps a [`Fault`] into its own error enum and adds its own
//! codes (A2A's `-32001`…, MCP's session errors) there.

use serde_json::{Map, Value, json};

pub const VERSION: &str = "2.0";

/// The codes JSON-RPC reserves (§5.1).
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
    /// The first of the "server error" codes an implementation may define.
    pub const SERVER_ERROR: i64 = -32000;
}

/// An id longer than this is refused: a client's id is echoed in every answer and log line.
const MAX_ID_BYTES: usize = 256;
/// A method name longer than this is no method of any protocol the node speaks.
const MAX_METHOD_CHARS: usize = 128;

/// A message JSON-RPC itself refuses, before any method is looked at.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Fault {
    #[error("Parse error: {0}")]
    Parse(String),
    #[error("Invalid Request: {0}")]
    InvalidRequest(String),
    #[error("Method not found: {0}")]
    MethodNotFound(String),
    #[error("Invalid params: {0}")]
    InvalidParams(String),
}

impl Fault {
    pub fn code(&self) -> i64 {
        match self {
            Fault::Parse(_) => code::PARSE_ERROR,
            Fault::InvalidRequest(_) => code::INVALID_REQUEST,
            Fault::MethodNotFound(_) => code::METHOD_NOT_FOUND,
            Fault::InvalidParams(_) => code::INVALID_PARAMS,
        }
    }
}

/// The faults a protocol's own error raises for itself (a parameter it
/// reads, a request it refuses), for every error that wraps a [`Fault`].
pub trait Faults: From<Fault> {
    fn invalid_request(why: impl Into<String>) -> Self {
        Fault::InvalidRequest(why.into()).into()
    }

    fn invalid_params(why: impl Into<String>) -> Self {
        Fault::InvalidParams(why.into()).into()
    }
}

impl<T: From<Fault>> Faults for T {}

/// A refused message: the fault, and the id to answer it with (null when none could be read).
#[derive(Debug)]
pub struct Refused {
    pub id: Value,
    pub fault: Fault,
}

/// How a protocol reads JSON-RPC where the specification leaves it a choice.
#[derive(Debug, Clone, Copy)]
pub struct Dialect {
    /// The protocol's name in the batch refusal.
    pub name: &'static str,
    /// A message without an id is a notification (else a request whose id is null).
    pub notifications: bool,
    /// The peer may answer requests of ours (a message with an id and no method).
    pub responses: bool,
    /// `params` may be an array; when not, one is `-32602`.
    pub positional_params: bool,
}

/// One inbound message.
#[derive(Debug, PartialEq)]
pub enum Inbound {
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
        params: Value,
    },
    /// The peer's answer to a request of ours: its result, or its error object.
    Response {
        id: Value,
        outcome: Result<Value, Value>,
    },
}

/// Classify one body as `dialect` reads it.
pub fn parse(raw: &[u8], dialect: Dialect) -> Result<Inbound, Refused> {
    let body: Value = serde_json::from_slice(raw).map_err(|error| Refused {
        id: Value::Null,
        fault: Fault::Parse(error.to_string()),
    })?;
    parse_value(body, dialect)
}

/// [`parse`] of a body already read as JSON.
pub fn parse_value(body: Value, dialect: Dialect) -> Result<Inbound, Refused> {
    let refuse = |id: &Value, fault: Fault| Refused {
        id: id.clone(),
        fault,
    };
    let Value::Object(mut message) = body else {
        let why = if body.is_array() {
            format!("batches are not supported by {}", dialect.name)
        } else {
            "a message must be a JSON object".to_string()
        };
        return Err(refuse(&Value::Null, Fault::InvalidRequest(why)));
    };
    let id = match message.remove("id") {
        None if !dialect.notifications => Some(Value::Null),
        Some(Value::Null) if dialect.notifications => {
            let why = "id must be a string or an integer (null is not an id)";
            return Err(refuse(&Value::Null, Fault::InvalidRequest(why.into())));
        }
        id => id,
    };
    if let Some(id) = &id
        && !valid_id(id)
    {
        let why = "id must be a string or an integer";
        return Err(refuse(&Value::Null, Fault::InvalidRequest(why.into())));
    }
    let reply_id = id.clone().unwrap_or(Value::Null);
    if message.get("jsonrpc").and_then(Value::as_str) != Some(VERSION) {
        let why = "'jsonrpc' must be exactly \"2.0\"";
        return Err(refuse(&reply_id, Fault::InvalidRequest(why.into())));
    }
    match message.remove("method") {
        Some(Value::String(method)) => {
            if method.chars().count() > MAX_METHOD_CHARS {
                return Err(refuse(
                    &reply_id,
                    Fault::MethodNotFound("(a name that long)".into()),
                ));
            }
            let params =
                read_params(message.remove("params"), dialect).map_err(|fault| refuse(&reply_id, fault))?;
            Ok(match id {
                Some(id) => Inbound::Request { id, method, params },
                None => Inbound::Notification { method, params },
            })
        }
        Some(_) => Err(refuse(
            &reply_id,
            Fault::InvalidRequest("method must be a string".into()),
        )),
        None => read_response(message, id, dialect).map_err(|fault| refuse(&reply_id, fault)),
    }
}

fn read_params(params: Option<Value>, dialect: Dialect) -> Result<Value, Fault> {
    match params.unwrap_or(Value::Null) {
        params @ (Value::Null | Value::Object(_)) => Ok(params),
        params @ Value::Array(_) if dialect.positional_params => Ok(params),
        _ if dialect.positional_params => Err(Fault::InvalidRequest(
            "params must be an object or an array".into(),
        )),
        _ => Err(Fault::InvalidParams("params must be an object".into())),
    }
}

fn read_response(
    mut message: Map<String, Value>,
    id: Option<Value>,
    dialect: Dialect,
) -> Result<Inbound, Fault> {
    let id = match id {
        Some(id) if dialect.responses && !id.is_null() => id,
        _ if dialect.responses => {
            let why = "a message needs a method, or an id with a result or error";
            return Err(Fault::InvalidRequest(why.into()));
        }
        _ => return Err(Fault::InvalidRequest("method is required".into())),
    };
    let outcome = match (message.remove("result"), message.remove("error")) {
        (Some(result), None) => Ok(result),
        (None, Some(error)) => Err(error),
        _ => {
            let why = "a response has exactly one of result and error";
            return Err(Fault::InvalidRequest(why.into()));
        }
    };
    Ok(Inbound::Response { id, outcome })
}

/// An id JSON-RPC allows and the node echoes: a short string, an integer, or null.
pub fn valid_id(id: &Value) -> bool {
    match id {
        Value::Null => true,
        Value::String(text) => text.len() <= MAX_ID_BYTES,
        Value::Number(number) => number.is_i64() || number.is_u64(),
        _ => false,
    }
}

/// The successful answer to request `id`.
pub fn result(id: &Value, result: impl serde::Serialize) -> Value {
    json!({"jsonrpc": VERSION, "id": id, "result": result})
}

/// The error answer to request `id`; `data` is the protocol's detail, if it has one.
pub fn error(id: &Value, code: i64, message: &str, data: Option<Value>) -> Value {
    let mut error = json!({"code": code, "message": message});
    if let Some(data) = data {
        error["data"] = data;
    }
    json!({"jsonrpc": VERSION, "id": id, "error": error})
}

/// A request of ours; `params` is left out when there are none.
pub fn request(id: impl Into<Value>, method: &str, params: Option<Value>) -> Value {
    let mut request = json!({"jsonrpc": VERSION, "id": id.into(), "method": method});
    if let Some(params) = params {
        request["params"] = params;
    }
    request
}

/// A notification of ours (no id, no answer).
pub fn notification(method: &str, params: Option<Value>) -> Value {
    let mut note = json!({"jsonrpc": VERSION, "method": method});
    if let Some(params) = params {
        note["params"] = params;
    }
    note
}

/// A peer's error object, as a client reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorObject {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl ErrorObject {
    /// `None` unless it has the integer code JSON-RPC requires.
    pub fn read(error: &Value) -> Option<ErrorObject> {
        Some(ErrorObject {
            code: error.get("code")?.as_i64()?,
            message: error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            data: error.get("data").cloned(),
        })
    }
}

/// What one message from a server is to a client waiting on request `id`.
#[derive(Debug, PartialEq)]
pub enum Reply {
    /// The answer: its result, or its error (an error without an integer code is `None`).
    Answer(Result<Value, Option<ErrorObject>>),
    /// A request from the server (its id), which the client must answer.
    ServerRequest(Value),
    /// A notification, or an answer to another request.
    Other,
}

/// Read `message` as a client waiting on request `id`.
pub fn reply_to(message: &Value, id: &Value) -> Reply {
    let message_id = message.get("id").filter(|id| !id.is_null());
    if message.get("method").is_some() {
        return match message_id {
            Some(request_id) => Reply::ServerRequest(request_id.clone()),
            None => Reply::Other,
        };
    }
    if message_id != Some(id) {
        return Reply::Other;
    }
    if let Some(error) = message.get("error") {
        return Reply::Answer(Err(ErrorObject::read(error)));
    }
    Reply::Answer(Ok(message.get("result").cloned().unwrap_or(Value::Null)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SERVER_OF_TASKS: Dialect = Dialect {
        name: "this test",
        notifications: false,
        responses: false,
        positional_params: true,
    };
    const SERVER_OF_SESSIONS: Dialect = Dialect {
        name: "this test",
        notifications: true,
        responses: true,
        positional_params: false,
    };

    fn code(raw: &[u8], dialect: Dialect) -> i64 {
        parse(raw, dialect).unwrap_err().fault.code()
    }

    #[test]
    fn messages_are_classified_by_method_and_id() {
        let request = parse(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#, SERVER_OF_SESSIONS).unwrap();
        assert!(matches!(request, Inbound::Request { ref method, .. } if method == "ping"));
        let note = parse(br#"{"jsonrpc":"2.0","method":"n"}"#, SERVER_OF_SESSIONS).unwrap();
        assert!(matches!(note, Inbound::Notification { .. }));
        let answer = parse(br#"{"jsonrpc":"2.0","id":"e1","result":{}}"#, SERVER_OF_SESSIONS).unwrap();
        assert!(matches!(answer, Inbound::Response { outcome: Ok(_), .. }));
        // Without notifications, a missing id is a request answered with a null id.
        let unnamed = parse(br#"{"jsonrpc":"2.0","method":"m"}"#, SERVER_OF_TASKS).unwrap();
        assert!(matches!(unnamed, Inbound::Request { id: Value::Null, .. }));
    }

    #[test]
    fn each_fault_has_its_code_and_keeps_the_id_it_could_read() {
        let both = [SERVER_OF_TASKS, SERVER_OF_SESSIONS];
        let cases: [(&[u8], &[Dialect], i64); 9] = [
            (br#"{"jsonrpc":"2.0","id":1,"method":"#, &both, -32700),
            (br#"[{"jsonrpc":"2.0","id":1,"method":"m"}]"#, &both, -32600),
            (br#"{"jsonrpc":"1.0","id":1,"method":"m"}"#, &both, -32600),
            (br#"{"jsonrpc":"2.0","id":1.5,"method":"m"}"#, &both, -32600),
            (br#"{"jsonrpc":"2.0","id":1,"method":7}"#, &both, -32600),
            (br#"{"jsonrpc":"2.0","id":1}"#, &both, -32600),
            (
                br#"{"jsonrpc":"2.0","id":1,"method":"m","params":[1]}"#,
                &[SERVER_OF_SESSIONS],
                -32602,
            ),
            (
                br#"{"jsonrpc":"2.0","id":1,"method":"m","params":3}"#,
                &[SERVER_OF_SESSIONS],
                -32602,
            ),
            (
                br#"{"jsonrpc":"2.0","id":1,"method":"m","params":3}"#,
                &[SERVER_OF_TASKS],
                -32600,
            ),
        ];
        for (raw, dialects, expected) in cases {
            for dialect in dialects {
                let text = String::from_utf8_lossy(raw);
                assert_eq!(code(raw, *dialect), expected, "{text} as {dialect:?}");
            }
        }
        let positional = br#"{"jsonrpc":"2.0","id":1,"method":"m","params":[1]}"#;
        assert!(parse(positional, SERVER_OF_TASKS).is_ok());
        let null_id = br#"{"jsonrpc":"2.0","id":null,"method":"m"}"#;
        assert_eq!(code(null_id, SERVER_OF_SESSIONS), -32600);
        let refused = parse(br#"{"jsonrpc":"1.0","id":7,"method":"m"}"#, SERVER_OF_SESSIONS).unwrap_err();
        assert_eq!(refused.id, json!(7));
    }

    #[test]
    fn answers_and_requests_have_the_envelope() {
        assert_eq!(
            result(&json!(1), json!({"a": 1})),
            json!({"jsonrpc": "2.0", "id": 1, "result": {"a": 1}})
        );
        let refusal = error(&Value::Null, -32601, "no", None);
        assert_eq!(
            refusal,
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32601, "message": "no"}})
        );
        assert_eq!(
            request(3, "m", None),
            json!({"jsonrpc": "2.0", "id": 3, "method": "m"})
        );
        assert_eq!(
            notification("n", Some(json!({}))),
            json!({"jsonrpc": "2.0", "method": "n", "params": {}})
        );
    }

    #[test]
    fn a_client_tells_its_answer_from_the_servers_requests_and_other_answers() {
        let id = json!(7);
        let ok = json!({"jsonrpc": "2.0", "id": 7, "result": {"tools": []}});
        assert_eq!(reply_to(&ok, &id), Reply::Answer(Ok(json!({"tools": []}))));
        let failed = json!({"jsonrpc": "2.0", "id": 7, "error": {"code": -32602, "message": "Unknown tool"}});
        let expected = ErrorObject {
            code: -32602,
            message: "Unknown tool".into(),
            data: None,
        };
        assert_eq!(reply_to(&failed, &id), Reply::Answer(Err(Some(expected))));
        assert_eq!(
            reply_to(&json!({"id": 7, "error": {"code": "x"}}), &id),
            Reply::Answer(Err(None))
        );
        assert_eq!(reply_to(&json!({"id": "7", "result": {}}), &id), Reply::Other);
        let asked = json!({"jsonrpc": "2.0", "id": 7, "method": "elicitation/create"});
        assert_eq!(reply_to(&asked, &id), Reply::ServerRequest(json!(7)));
        assert_eq!(
            reply_to(&json!({"jsonrpc": "2.0", "method": "n"}), &id),
            Reply::Other
        );
    }
}
