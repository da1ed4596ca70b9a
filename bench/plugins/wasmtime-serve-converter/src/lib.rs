//! Bench row 16's peer (issue 42), not a node plugin: row 1's Agora exchange
//! with the unit converter, written as the `wasi:http/proxy` component a user
//! would hand to `wasmtime serve` instead of running Agora Node. It does the
//! work the node and its `plugins/unit-converter` do for that request: read the
//! POST body, check it is an Agora request (§6.1) for the unit converter's
//! protocol, convert with the plugin's logic and answer the node's exact reply
//! bytes (`{"body":…,"status":"success"}`, keys sorted as the node writes
//! them), so that the row's one check judges both servers alike. What it cannot
//! answer gets a 4xx with a JSON error, never a trap: a trap would be counted
//! against the runtime, not the request.

use base64::Engine as _;
use serde::Serialize;
use serde_json::{Value, json};
use wasip2::http::types::{
    ErrorCode, Fields, IncomingRequest, Method, OutgoingBody, OutgoingResponse, ResponseOutparam,
};
use wasip2::io::streams::StreamError;

wasip2::http::proxy::export!(Converter);

/// SHA-1 (hex) of `protocols/unit-conversion.md`, from build.rs.
const UNIT_CONVERSION_HASH: &str = env!("UNIT_CONVERSION_HASH");

/// The node's default `http.max_body_bytes`: a larger body is refused the same way.
const MAX_BODY_BYTES: usize = 1 << 20;

/// The most a single `blocking-write-and-flush` accepts (wasi:io/streams).
const WRITE_CHUNK: usize = 4096;

struct Converter;

impl wasip2::exports::http::incoming_handler::Guest for Converter {
    fn handle(request: IncomingRequest, response_out: ResponseOutparam) {
        let (status, body) = match agora_reply(&request) {
            Ok(reply) => (200, reply),
            Err(refusal) => (refusal.status, refusal.json()),
        };
        respond(response_out, status, &body);
    }
}

/// Why a request gets no Agora reply: an HTTP status and its message.
struct Refusal {
    status: u16,
    message: String,
}

impl Refusal {
    fn new(status: u16, message: impl Into<String>) -> Refusal {
        Refusal {
            status,
            message: message.into(),
        }
    }

    /// The node's error shape (`{"status":"failure","error":…}`).
    fn json(&self) -> Vec<u8> {
        json!({"status": "failure", "error": self.message})
            .to_string()
            .into_bytes()
    }
}

/// The node's success reply (§6.2) for a single-round exchange: no conversation fields.
#[derive(Serialize)]
struct Success<'a> {
    body: &'a Value,
    status: &'static str,
}

fn agora_reply(request: &IncomingRequest) -> Result<Vec<u8>, Refusal> {
    if request.path_with_query().as_deref() != Some("/agora") {
        return Err(Refusal::new(404, "this server answers POST /agora only"));
    }
    if !matches!(request.method(), Method::Post) {
        return Err(Refusal::new(405, "use POST"));
    }
    if !is_json(request) {
        return Err(Refusal::new(415, "Content-Type must be application/json"));
    }
    let raw = read_body(request)?;
    let Ok(Value::Object(mut fields)) = serde_json::from_slice::<Value>(&raw) else {
        return Err(Refusal::new(400, "the request must be a JSON object"));
    };
    let body = match fields.remove("body") {
        Some(body @ (Value::String(_) | Value::Object(_))) => body,
        _ => {
            return Err(Refusal::new(400, "field `body` must be a string or an object"));
        }
    };
    match fields.get("protocolHash").and_then(Value::as_str) {
        Some(hash) if normalise_hash(hash).as_deref() == Some(UNIT_CONVERSION_HASH) => {}
        _ => {
            return Err(Refusal::new(
                404,
                "only the unit converter's protocolHash is served here",
            ));
        }
    }
    // A body that is not even an object is still a protocol-level error, answered in `body`.
    let answer = match parse_body(body) {
        Some(request) => answer(request),
        None => json!({"error": "body must be an object {\"value\", \"from\", \"to\"}"}),
    };
    serde_json::to_vec(&Success {
        body: &answer,
        status: "success",
    })
    .map_err(|e| Refusal::new(500, format!("cannot encode the reply: {e}")))
}

/// The node's check: the media type is `application/json`, parameters aside.
fn is_json(request: &IncomingRequest) -> bool {
    request
        .headers()
        .get("content-type")
        .first()
        .and_then(|value| std::str::from_utf8(value).ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"))
}

/// A SHA-1 in hex or base64, as lowercase hex (the node's `normalise_hash`).
fn normalise_hash(hash: &str) -> Option<String> {
    if hash.len() == 40 && hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Some(hash.to_ascii_lowercase());
    }
    let engines = [
        &base64::engine::general_purpose::STANDARD,
        &base64::engine::general_purpose::URL_SAFE,
        &base64::engine::general_purpose::STANDARD_NO_PAD,
        &base64::engine::general_purpose::URL_SAFE_NO_PAD,
    ];
    engines
        .into_iter()
        .find_map(|engine| engine.decode(hash).ok())
        .filter(|digest| digest.len() == 20)
        .map(|digest| digest.iter().map(|b| format!("{b:02x}")).collect())
}

fn read_body(request: &IncomingRequest) -> Result<Vec<u8>, Refusal> {
    let incoming = request
        .consume()
        .map_err(|()| Refusal::new(400, "the request body cannot be read"))?;
    let stream = incoming
        .stream()
        .map_err(|()| Refusal::new(400, "the request body cannot be read"))?;
    let mut bytes = Vec::new();
    loop {
        match stream.blocking_read(WRITE_CHUNK as u64 * 16) {
            Ok(chunk) => bytes.extend_from_slice(&chunk),
            Err(StreamError::Closed) => break,
            Err(StreamError::LastOperationFailed(error)) => {
                return Err(Refusal::new(
                    400,
                    format!("reading the body failed: {}", error.to_debug_string()),
                ));
            }
        }
        if bytes.len() > MAX_BODY_BYTES {
            return Err(Refusal::new(
                413,
                format!("the request body is over the {MAX_BODY_BYTES}-byte limit"),
            ));
        }
    }
    Ok(bytes)
}

fn respond(response_out: ResponseOutparam, status: u16, body: &[u8]) {
    let headers = Fields::from_list(&[
        ("content-type".to_string(), b"application/json".to_vec()),
        ("content-length".to_string(), body.len().to_string().into_bytes()),
    ]);
    let Ok(headers) = headers else {
        ResponseOutparam::set(
            response_out,
            Err(ErrorCode::InternalError(Some("invalid response headers".into()))),
        );
        return;
    };
    let response = OutgoingResponse::new(headers);
    let outgoing = match (response.set_status_code(status), response.body()) {
        (Ok(()), Ok(outgoing)) => outgoing,
        _ => {
            ResponseOutparam::set(
                response_out,
                Err(ErrorCode::InternalError(Some("cannot start the response".into()))),
            );
            return;
        }
    };
    ResponseOutparam::set(response_out, Ok(response));
    // Past this point the status is sent: a failed write means the client left.
    if let Ok(stream) = outgoing.write() {
        let written = body
            .chunks(WRITE_CHUNK)
            .try_for_each(|chunk| stream.blocking_write_and_flush(chunk));
        drop(stream);
        if written.is_ok() {
            let _ = OutgoingBody::finish(outgoing, None);
        }
    }
}

// The unit converter's own logic, the very file the plugin compiles.
#[path = "../../../../plugins/unit-converter/src/convert.rs"]
mod convert;

use convert::{answer, request_of as parse_body};
