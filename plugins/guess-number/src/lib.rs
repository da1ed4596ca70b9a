//! Serves `protocols/guess-number.md`, a multi-round Agora protocol: each
//! conversation has its own secret number, kept in the host's key-value store
//! under the conversation id; the guesses so far are read back from the
//! conversation's history through `host::history()`. Invalid input is a
//! protocol-level error, answered inside `body`.

use std::hash::{BuildHasher, Hasher};

use agora_plugin_sdk::prelude::*;

struct GuessNumber;

const DEFAULT_RANGE: (i64, i64) = (1, 100);
const MAX_SPAN: i64 = 1_000_000;
/// Games older than this are forgotten when a new one starts (conversations
/// expire long before; this only bounds what the store keeps).
const GAME_RETENTION_MS: u64 = 2 * 24 * 3600 * 1000;
/// Old games looked at per new game, so pruning stays bounded.
const PRUNE_SCAN: u32 = 64;

#[derive(Serialize, Deserialize)]
struct Game {
    secret: i64,
    min: i64,
    max: i64,
    solved: bool,
    started_ms: u64,
}

/// One request of the protocol.
enum Request {
    Start { min: i64, max: i64 },
    Guess(i64),
    History,
}

fn game_key(conversation: &str) -> String {
    format!("game:{conversation}")
}

/// A body is an object, or (as agora-protocol 0.2.0 sends every body) a string holding one.
fn body_object(body: &str) -> Option<Value> {
    match serde_json::from_str::<Value>(body).ok()? {
        Value::String(inner) => serde_json::from_str::<Value>(&inner)
            .ok()
            .filter(Value::is_object),
        object @ Value::Object(_) => Some(object),
        _ => None,
    }
}

fn parse_request(body: &Value) -> Result<Request, String> {
    if let Some(start) = body.get("start") {
        let bound = |key: &str| {
            start
                .get(key)
                .and_then(Value::as_i64)
                .ok_or_else(|| format!("\"start\" needs an integer \"{key}\""))
        };
        let (min, max) = (bound("min")?, bound("max")?);
        if min > max {
            return Err("\"min\" must not be above \"max\"".into());
        }
        if max.saturating_sub(min) > MAX_SPAN {
            return Err(format!("the range may span at most {MAX_SPAN}"));
        }
        return Ok(Request::Start { min, max });
    }
    if let Some(guess) = body.get("guess") {
        return guess
            .as_i64()
            .map(Request::Guess)
            .ok_or_else(|| "\"guess\" must be an integer".to_string());
    }
    if body.get("history").is_some() {
        return Ok(Request::History);
    }
    Err("body must be {\"start\": {\"min\", \"max\"}}, {\"guess\": n} or {\"history\": true}".into())
}

/// A secret from the host's randomness: std seeds `RandomState` from WASI's random source.
fn secret_in(min: i64, max: i64) -> i64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(host::now_ms());
    let span = (max - min + 1) as u64;
    min + (hasher.finish() % span) as i64
}

fn new_game(conversation: &str, min: i64, max: i64) -> Result<Game, HostError> {
    prune_old_games();
    let game = Game {
        secret: secret_in(min, max),
        min,
        max,
        solved: false,
        started_ms: host::now_ms(),
    };
    host::kv_set_json(&game_key(conversation), &game)?;
    Ok(game)
}

/// Forget old games; one that cannot be read is forgotten too.
fn prune_old_games() {
    let now = host::now_ms();
    for key in host::kv_keys("game:", PRUNE_SCAN) {
        let stale = match host::kv_get_json::<Game>(&key) {
            Ok(Some(game)) => now.saturating_sub(game.started_ms) > GAME_RETENTION_MS,
            Ok(None) | Err(_) => true,
        };
        if stale {
            // Pruning is best effort: a game left behind is looked at again next time.
            let _ = host::kv_delete(&key);
        }
    }
}

/// The guesses earlier rounds made, from the conversation's history.
fn previous_guesses() -> Result<Vec<i64>, HostError> {
    Ok(host::history()?
        .into_iter()
        .filter(|entry| entry.role == "user")
        .filter_map(|entry| {
            let text = entry.body.to_string();
            body_object(&text)?.get("guess")?.as_i64()
        })
        .collect())
}

/// A protocol-level error, answered inside `body` (spec §10.3).
fn refusal(error: impl Into<String>) -> Value {
    json!({"error": error.into()})
}

/// The answer to one request: the protocol's reply or refusal; the host's
/// failures are the node's, not the sender's.
fn play(conversation: &str, request: Request) -> Result<Value, HostError> {
    let stored = host::kv_get_json::<Game>(&game_key(conversation))?;
    match request {
        Request::Start { min, max } => {
            if stored.is_some() {
                return Ok(refusal("this conversation's game has already started"));
            }
            let game = new_game(conversation, min, max)?;
            Ok(json!({"started": true, "min": game.min, "max": game.max}))
        }
        Request::History => {
            let solved = stored.is_some_and(|game| game.solved);
            Ok(json!({"guesses": previous_guesses()?, "solved": solved}))
        }
        Request::Guess(guess) => {
            let mut game = match stored {
                Some(game) => game,
                None => new_game(conversation, DEFAULT_RANGE.0, DEFAULT_RANGE.1)?,
            };
            if game.solved {
                return Ok(refusal("the game is over: the number was already guessed"));
            }
            if guess < game.min || guess > game.max {
                return Ok(refusal(format!(
                    "the guess must be between {} and {}",
                    game.min, game.max
                )));
            }
            let result = match guess.cmp(&game.secret) {
                std::cmp::Ordering::Less => "higher",
                std::cmp::Ordering::Greater => "lower",
                std::cmp::Ordering::Equal => "correct",
            };
            if result == "correct" {
                game.solved = true;
                host::kv_set_json(&game_key(conversation), &game)?;
            }
            let guesses = previous_guesses()?.len() + 1;
            Ok(json!({"result": result, "guess": guess, "guesses": guesses}))
        }
    }
}

impl Plugin for GuessNumber {
    fn manifest() -> Manifest {
        Manifest::new("guess-number", env!("CARGO_PKG_VERSION"))
            .description("Guess the number, a multi-round game (protocols/guess-number.md)")
            .protocol(include_str!("../../../protocols/guess-number.md"))
    }

    fn handle(message: Message) -> Result<String, Failure> {
        let Some(conversation) = &message.conversation else {
            return reply(refusal(
                "this protocol needs a multi-round conversation (\"multiround\": true)",
            ));
        };
        let request = body_object(&message.body)
            .ok_or_else(|| "body must be a JSON object".to_string())
            .and_then(|body| parse_request(&body));
        match request {
            Ok(request) => reply(play(conversation, request)?),
            Err(error) => reply(refusal(error)),
        }
    }
}

export_plugin!(GuessNumber);
