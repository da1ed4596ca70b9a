//! The console's page: its HTML, script and styles, and the vendored charting
//! library (uPlot, with its licence beside it in `web/vendor/`), all embedded
//! in the binary. Loading them needs no token: they hold no data, and a page
//! that can ask for the token must load without one. Everything the page shows
//! comes from the API, which does need it.
//!
//! The page lives at `{path}/` so its files and the API are relative to it
//! (`console.js`, `api/overview`), whatever `console.path` is.

use axum::response::{IntoResponse, Redirect, Response};

use crate::policy::page::{CONSOLE, embedded};

const PAGE: &str = include_str!("../../web/console/index.html");
const SCRIPT: &str = include_str!("../../web/console/console.js");
const STYLE: &str = include_str!("../../web/console/console.css");
const VENDOR_UPLOT: &str = include_str!("../../web/vendor/uPlot.iife.min.js");
const VENDOR_UPLOT_STYLE: &str = include_str!("../../web/vendor/uPlot.min.css");

const HTML: &str = "text/html; charset=utf-8";
const JAVASCRIPT: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

/// `{path}` itself: to `{path}/`, where the page's relative links resolve.
pub fn to_the_page(base: &str) -> Response {
    Redirect::permanent(&format!("{base}/")).into_response()
}

pub async fn page() -> Response {
    embedded(CONSOLE, HTML, PAGE)
}

pub async fn script() -> Response {
    embedded(CONSOLE, JAVASCRIPT, SCRIPT)
}

pub async fn style() -> Response {
    embedded(CONSOLE, CSS, STYLE)
}

pub async fn uplot() -> Response {
    embedded(CONSOLE, JAVASCRIPT, VENDOR_UPLOT)
}

pub async fn uplot_style() -> Response {
    embedded(CONSOLE, CSS, VENDOR_UPLOT_STYLE)
}
