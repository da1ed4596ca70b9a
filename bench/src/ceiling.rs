//! The ceiling of row 1: a bare axum handler returning, for every POST, the
//! exact bytes the node answers, in the same process layout as the node (its
//! own process, tokio's default multi-threaded runtime, one loopback listener).

use std::path::Path;

use anyhow::Result;
use axum::Router;
use axum::body::Bytes;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::post;

pub fn serve(port: u16, body_file: &Path) -> Result<()> {
    let reply = Bytes::from(std::fs::read(body_file)?);
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        let handler = move |body: Bytes| {
            let reply = reply.clone();
            async move {
                // Read the request like the node does, answer the same bytes.
                std::hint::black_box(body.len());
                ([(header::CONTENT_TYPE, "application/json")], reply).into_response()
            }
        };
        let app = Router::new().fallback(post(handler));
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        println!("ceiling listening on http://127.0.0.1:{port}");
        axum::serve(listener, app).await?;
        anyhow::Ok(())
    })
}
