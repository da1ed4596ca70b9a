//! (Being written: see the issue for the hai transport.)

use axum::Router;

use super::NodeState;

pub fn router(state: NodeState) -> Router {
    Router::new().with_state(state)
}
