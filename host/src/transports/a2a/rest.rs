//! A2A 1.0's HTTP+JSON binding (§"HTTP+JSON/REST Protocol Binding"), under
//! `a2a.rest_path`, as `a2a-sdk` 1.3.0's `RestTransport` speaks it. Only the
//! framing is here: each route reads its method's params from the path, the
//! query and the body, and hands them to the one [`super::dispatch`] the
//! JSON-RPC binding uses, behind the same gate (token, `A2A-Version`), body
//! limit and admission, so a task is the same task whichever binding a client
//! (or a later client) uses.
//!
//! - `POST /message:send`, `POST /message:stream` (SSE): the body is the params;
//! - `GET /tasks/{id}` (`historyLength`), `GET /tasks` (ListTasks, its query);
//! - `POST /tasks/{id}:cancel`, `GET|POST /tasks/{id}:subscribe` (SSE): the
//!   body, if any, is ignored, as the SDK's server does;
//! - `GET /extendedAgentCard`;
//! - `POST|GET /tasks/{id}/pushNotificationConfigs` (create: the body is the
//!   config; list: `pageSize`, `pageToken`), `GET|DELETE
//!   /tasks/{id}/pushNotificationConfigs/{configId}`: the path's ids win over
//!   the body's, as on the SDK's server; a delete answers `{}`.
//!
//! Answers are the bare proto-JSON object (`application/a2a+json`); a stream
//! sends one bare `StreamResponse` per event; errors are `google.rpc.Status`
//! bodies with the status and `ErrorInfo.reason` of [`A2aError::mapping`]. A
//! path the binding does not have is 404, a path asked with a method it does
//! not take 405, both in that shape.

use std::net::SocketAddr;

use axum::Router;
use axum::extract::rejection::BytesRejection;
use axum::extract::{ConnectInfo, FromRequestParts, Path, RawQuery};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method as HttpMethod, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::error::A2aError;
use super::state::Shared;
use super::{Answer, Binding, Method, Request, authorize, check_version, deeper_than_stored, dispatch};
use crate::jsonrpc::Faults;

/// The media type the SDK's REST server answers with.
const MEDIA_TYPE: &str = "application/a2a+json";

/// Levels an HTTP+JSON body wraps around its message: the body itself.
const BODY_LEVELS_ABOVE_MESSAGE: usize = 1;

/// The binding's routes under `base` (no trailing `/`).
pub(super) fn routes(base: &str) -> Router<Shared> {
    let path = |tail: &str| format!("{base}{tail}");
    Router::new()
        .route(&path("/message:send"), post(send_message).fallback(wrong_method))
        .route(
            &path("/message:stream"),
            post(send_streaming_message).fallback(wrong_method),
        )
        .route(&path("/tasks"), get(list_tasks).fallback(wrong_method))
        // The router cannot match a suffix after a parameter (`{id}:cancel`),
        // so the segment is split here.
        .route(&path("/tasks/{segment}"), any(task))
        .route(
            &path("/tasks/{id}/pushNotificationConfigs"),
            post(create_push_config)
                .get(list_push_configs)
                .fallback(wrong_method),
        )
        .route(
            &path("/tasks/{id}/pushNotificationConfigs/{config}"),
            get(get_push_config)
                .delete(delete_push_config)
                .fallback(wrong_method),
        )
        .route(
            &path("/extendedAgentCard"),
            get(extended_card).fallback(wrong_method),
        )
        .route(&path("/{*unknown}"), any(unknown_path))
}

/// What every call of the binding carries to [`serve`], taken from the request.
struct Call {
    shared: Shared,
    peer: SocketAddr,
    headers: HeaderMap,
}

impl FromRequestParts<Shared> for Call {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, shared: &Shared) -> Result<Call, Response> {
        let ConnectInfo(peer) = ConnectInfo::<SocketAddr>::from_request_parts(parts, shared)
            .await
            .map_err(IntoResponse::into_response)?;
        Ok(Call {
            shared: shared.clone(),
            peer,
            headers: parts.headers.clone(),
        })
    }
}

/// The gate, then the method, then the answer in this binding's shape.
async fn serve(call: Call, method: Method, params: Result<Value, A2aError>) -> Response {
    let answer = async {
        authorize(&call.shared, &call.headers)?;
        check_version(&call.headers)?;
        let request = Request {
            shared: call.shared,
            binding: Binding::Rest,
            client: call.peer.ip(),
        };
        dispatch(request, method, params?).await
    }
    .await;
    match answer {
        Ok(Answer::Result(result)) => {
            // A method without a result (a delete) answers an empty object: the
            // SDK's client reads every answer as JSON.
            let result = if result.is_null() { json!({}) } else { result };
            let mut response = axum::Json(result).into_response();
            response
                .headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(MEDIA_TYPE));
            response
        }
        Ok(Answer::Stream(stream)) => stream,
        Err(error) => error.rest_response(),
    }
}

async fn send_message(call: Call, raw: Result<Bytes, BytesRejection>) -> Response {
    let params = body_params(&call.shared, raw);
    serve(call, Method::SendMessage, params).await
}

async fn send_streaming_message(call: Call, raw: Result<Bytes, BytesRejection>) -> Response {
    let params = body_params(&call.shared, raw);
    serve(call, Method::SendStreamingMessage, params).await
}

async fn list_tasks(call: Call, RawQuery(query): RawQuery) -> Response {
    let params = query_params(query.as_deref(), LIST_TASKS_QUERY, Map::new());
    serve(call, Method::ListTasks, params).await
}

/// `/tasks/{id}`, `/tasks/{id}:cancel`, `/tasks/{id}:subscribe`.
async fn task(
    call: Call,
    method: HttpMethod,
    Path(segment): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let (id, verb) = match segment.rsplit_once(':') {
        Some((id, verb)) => (id, Some(verb)),
        None => (segment.as_str(), None),
    };
    let with_id = || {
        let mut params = Map::new();
        params.insert("id".into(), Value::String(id.to_string()));
        params
    };
    let (a2a_method, params) = match (verb, &method) {
        (None, &HttpMethod::GET) => (
            Method::GetTask,
            query_params(query.as_deref(), GET_TASK_QUERY, with_id()),
        ),
        (Some("cancel"), &HttpMethod::POST) => (Method::CancelTask, Ok(Value::Object(with_id()))),
        (Some("subscribe"), &HttpMethod::GET | &HttpMethod::POST) => {
            (Method::SubscribeToTask, Ok(Value::Object(with_id())))
        }
        (None | Some("cancel" | "subscribe"), _) => return wrong_method(method).await,
        (Some(verb), _) => {
            return A2aError::Rpc(crate::jsonrpc::Fault::MethodNotFound(format!(
                "tasks/{{id}}:{}",
                super::truncate(verb)
            )))
            .rest_response();
        }
    };
    serve(call, a2a_method, params).await
}

async fn create_push_config(
    call: Call,
    Path(id): Path<String>,
    raw: Result<Bytes, BytesRejection>,
) -> Response {
    let params = body_params(&call.shared, raw).map(|body| {
        let mut config = match body {
            Value::Object(config) => config,
            _ => Map::new(),
        };
        config.insert("taskId".into(), Value::String(id));
        Value::Object(config)
    });
    serve(call, Method::CreatePushConfig, params).await
}

async fn list_push_configs(call: Call, Path(id): Path<String>, RawQuery(query): RawQuery) -> Response {
    let mut params = Map::new();
    params.insert("taskId".into(), Value::String(id));
    let params = query_params(query.as_deref(), LIST_PUSH_CONFIGS_QUERY, params);
    serve(call, Method::ListPushConfigs, params).await
}

fn push_config_ids(task_id: String, config_id: String) -> Result<Value, A2aError> {
    Ok(json!({"taskId": task_id, "id": config_id}))
}

async fn get_push_config(call: Call, Path((id, config)): Path<(String, String)>) -> Response {
    serve(call, Method::GetPushConfig, push_config_ids(id, config)).await
}

async fn delete_push_config(call: Call, Path((id, config)): Path<(String, String)>) -> Response {
    serve(call, Method::DeletePushConfig, push_config_ids(id, config)).await
}

async fn extended_card(call: Call) -> Response {
    serve(call, Method::GetExtendedAgentCard, Ok(json!({}))).await
}

async fn wrong_method(method: HttpMethod) -> Response {
    A2aError::MethodNotAllowed(format!("this path does not take {method}")).rest_response()
}

async fn unknown_path(Path(unknown): Path<String>) -> Response {
    A2aError::Rpc(crate::jsonrpc::Fault::MethodNotFound(super::truncate(&unknown))).rest_response()
}

/// A body as its method's params: JSON within the body limit and as deep as
/// a stored task can be read back; anything else is an invalid request (the
/// SDK's server reads a body it cannot parse so).
fn body_params(shared: &Shared, raw: Result<Bytes, BytesRejection>) -> Result<Value, A2aError> {
    let raw = match raw {
        Ok(raw) => raw,
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return Err(A2aError::PayloadTooLarge(super::body_limit(&shared.node)));
        }
        Err(rejection) => return Err(A2aError::invalid_request(format!("unreadable body: {rejection}"))),
    };
    if let Some(error) = deeper_than_stored(&raw, BODY_LEVELS_ABOVE_MESSAGE) {
        return Err(error);
    }
    if raw.trim_ascii().is_empty() {
        return Ok(Value::Null);
    }
    let params: Value = serde_json::from_slice(&raw)
        .map_err(|error| A2aError::invalid_request(format!("the body is not JSON: {error}")))?;
    if !params.is_object() {
        return Err(A2aError::invalid_request("the body must be a JSON object"));
    }
    Ok(params)
}

/// How a query parameter's text becomes its JSON value.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Text,
    Integer,
    Boolean,
}

const GET_TASK_QUERY: &[(&str, Kind)] = &[("historyLength", Kind::Integer)];
const LIST_PUSH_CONFIGS_QUERY: &[(&str, Kind)] = &[("pageSize", Kind::Integer), ("pageToken", Kind::Text)];
const LIST_TASKS_QUERY: &[(&str, Kind)] = &[
    ("contextId", Kind::Text),
    ("status", Kind::Text),
    ("pageSize", Kind::Integer),
    ("pageToken", Kind::Text),
    ("historyLength", Kind::Integer),
    ("includeArtifacts", Kind::Boolean),
];

/// A query as params, added to `params` (which the path filled): as the SDK's
/// server reads it, keys are the camelCase names, a key the method does not
/// have is ignored, and the last of a repeated key wins.
fn query_params(
    query: Option<&str>,
    known: &[(&str, Kind)],
    mut params: Map<String, Value>,
) -> Result<Value, A2aError> {
    for (key, text) in url::form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        let Some((name, kind)) = known.iter().find(|(name, _)| *name == key) else {
            continue;
        };
        let value = match kind {
            Kind::Text => Some(Value::String(text.to_string())),
            Kind::Integer => text.parse::<u64>().ok().map(Value::from),
            Kind::Boolean => match text.as_ref() {
                "true" => Some(Value::Bool(true)),
                "false" => Some(Value::Bool(false)),
                _ => None,
            },
        };
        let Some(value) = value else {
            return Err(A2aError::invalid_params(format!(
                "query parameter {name} cannot be {:?}",
                super::truncate(&text)
            )));
        };
        params.insert((*name).to_string(), value);
    }
    Ok(Value::Object(params))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_reads_as_the_sdks_server_reads_it() {
        let params = query_params(
            Some("contextId=c%201&pageSize=5&pageSize=7&includeArtifacts=true&unknown=x&status=TASK_STATE_WORKING"),
            LIST_TASKS_QUERY,
            Map::new(),
        )
        .unwrap();
        assert_eq!(
            params,
            json!({"contextId": "c 1", "pageSize": 7, "includeArtifacts": true, "status": "TASK_STATE_WORKING"})
        );
        let refused = query_params(Some("historyLength=x"), GET_TASK_QUERY, Map::new()).unwrap_err();
        assert_eq!(refused.mapping().reason, "INVALID_PARAMS");
    }
}
