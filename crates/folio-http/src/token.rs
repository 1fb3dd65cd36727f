//! The admin token (docs/security.md): with `http_auth_token_file` set, every PUT, POST and
//! DELETE, every `/api/v1/ledger/read` and every `/api/v1/bookie/sanity` (it writes) need `Authorization: Bearer <token>`, compared in
//! constant time, else 401 naming what is missing; the GET status routes and the dashboard's
//! pages stay open (the dashboard sends the token the operator types in for entry reads).

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;

use crate::server::AdminState;

/// The path whose reads need the token like a mutation (it serves ledger payloads).
pub(crate) const LEDGER_READ_PATH: &str = "/api/v1/ledger/read";

/// Reads the admin token from `path`: its content without surrounding whitespace. A missing,
/// unreadable or empty file is an error naming the file.
pub fn read_token_file(path: &std::path::Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read http_auth_token_file {}: {e}", path.display()))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(format!(
            "http_auth_token_file {} is empty: put the admin bearer token in it",
            path.display()
        ));
    }
    if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "http_auth_token_file {}: the token must be one line without spaces",
            path.display()
        ));
    }
    Ok(token.to_string())
}

/// Equal in time independent of where the bytes differ (only the expected length shows).
fn same_token(given: &[u8], expected: &[u8]) -> bool {
    let mut diff = u8::from(given.len() != expected.len());
    for (i, e) in expected.iter().enumerate() {
        diff |= e ^ given.get(i).copied().unwrap_or(0);
    }
    std::hint::black_box(diff) == 0
}

/// With a token configured, mutating requests and ledger reads must carry it.
pub(crate) async fn require_token(
    State(s): State<AdminState>,
    request: Request,
    next: Next,
) -> Response {
    let Some(expected) = &s.token else {
        return next.run(request).await;
    };
    let guarded = !matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    ) || request.uri().path() == LEDGER_READ_PATH
        || request.uri().path() == crate::bk_api::SANITY_PATH;
    if !guarded {
        return next.run(request).await;
    }
    let what = format!("{} {}", request.method(), request.uri().path());
    let given = match request.headers().get(header::AUTHORIZATION) {
        None => {
            return unauthorized(format!(
                "{what} needs an Authorization: Bearer <token> header (http_auth_token_file is set)"
            ));
        }
        Some(v) => v.as_bytes(),
    };
    let Some(token) = given
        .strip_prefix(b"Bearer ")
        .or_else(|| given.strip_prefix(b"bearer "))
    else {
        return unauthorized(format!(
            "{what}: the Authorization header is not a bearer token (expected \"Bearer <token>\")"
        ));
    };
    if !same_token(token, expected.as_bytes()) {
        return unauthorized(format!("{what}: wrong bearer token"));
    }
    next.run(request).await
}

/// 401 with `{"error": why}` and the scheme the client must use.
fn unauthorized(why: String) -> Response {
    let mut r = crate::bk_api::error(StatusCode::UNAUTHORIZED, why);
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer realm=\"folio-admin\""),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::same_token;

    #[test]
    fn tokens_match_only_exactly() {
        assert!(same_token(b"abc123", b"abc123"));
        for other in [&b""[..], b"abc12", b"abc1234", b"abc124", b"Abc123"] {
            assert!(!same_token(other, b"abc123"), "{other:?}");
        }
    }
}
