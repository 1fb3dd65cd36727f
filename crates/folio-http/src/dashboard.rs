//! The web dashboard, served at `/` and under `/ui/`: three hand-written files (no build
//! step, no CDN, nothing fetched at run time) embedded in the binary with `include_str!`.
//! The page reads the JSON of [`api`] and the process's `/metrics`; everything it shows comes
//! from those endpoints, which have their own tests.

mod api;
mod prom;

use axum::Router;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::server::AdminState;

const INDEX_HTML: &str = include_str!("../assets/index.html");
const APP_JS: &str = include_str!("../assets/app.js");
const APP_CSS: &str = include_str!("../assets/app.css");

pub(crate) fn routes() -> Router<AdminState> {
    Router::new()
        .route("/", get(index))
        .route("/ui", get(index))
        .route("/ui/", get(index))
        .route(
            "/ui/app.js",
            get(|| asset("text/javascript; charset=utf-8", APP_JS)),
        )
        .route(
            "/ui/app.css",
            get(|| asset("text/css; charset=utf-8", APP_CSS)),
        )
        .merge(api::routes())
}

async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX_HTML).await
}

async fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            // The page is the binary's: a new binary may serve new files under the same names.
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}
