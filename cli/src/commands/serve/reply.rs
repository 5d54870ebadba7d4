//! The server's answers: a status and a JSON body, and the one table from each error (the
//! engine's, the index's, an operation's, a body's) to its status. No answer names a path
//! outside the store.

use axum::http::header::{CONTENT_TYPE, RETRY_AFTER};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use spex_engine::Error;

use super::BODY_BYTES_MAX;

/// The served store's root as text, cut from error answers (set once, when the router is built).
pub(super) static STORE_ROOT: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// An HTTP answer: status and JSON body.
pub(super) struct Reply {
    pub(super) status: u16,
    pub(super) body: Value,
    pub(super) retry_after: bool,
    /// Bytes answered instead of the JSON body (an export's archive, `application/zstd`).
    pub(super) archive: Option<Vec<u8>>,
}

impl Reply {
    pub(super) fn ok(body: Value) -> Reply {
        Reply { status: 200, body, retry_after: false, archive: None }
    }

    /// An archive (a tar compressed with zstd), as bytes.
    pub(super) fn archive(bytes: Vec<u8>) -> Reply {
        Reply { archive: Some(bytes), ..Reply::ok(Value::Null) }
    }

    /// An error answer. No answer names a path outside the store: the store's root is cut from
    /// every message (its files are named relative to it).
    pub(super) fn error(status: u16, message: impl Into<String>) -> Reply {
        let mut message = message.into();
        if let Some(root) = STORE_ROOT.get() {
            message = message.replace(root.as_str(), "<store>");
        }
        Reply { status, body: json!({ "error": message }), retry_after: false, archive: None }
    }
}

impl IntoResponse for Reply {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        if let Some(bytes) = self.archive {
            let mut response = (status, bytes).into_response();
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/zstd"));
            return response;
        }
        let mut response = (status, self.body.to_string()).into_response();
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json; charset=utf-8"));
        if self.retry_after {
            headers.insert(RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

/// The reply for a body that could not be read: too large (413), too slow (408), or broken.
pub(super) fn body_error(error: &axum::Error) -> Reply {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(cause) = source {
        if cause.is::<http_body_util::LengthLimitError>() {
            return Reply::error(413, format!("the body is larger than {BODY_BYTES_MAX} bytes"));
        }
        if cause.is::<tower_http::timeout::TimeoutError>() {
            return Reply::error(408, "the body stopped arriving");
        }
        source = cause.source();
    }
    Reply::error(400, format!("cannot read the body: {error}"))
}

/// The reply for an engine error.
pub(super) fn engine_error(error: &Error) -> Reply {
    match error {
        Error::NoSuchSession { .. } => Reply::error(404, "no such session"),
        Error::InvalidId(_)
        | Error::InvalidInput { .. }
        | Error::InvalidCursor { .. }
        | Error::Revoked { .. } => Reply::error(400, error.to_string()),
        Error::TooLarge { .. } => Reply::error(413, error.to_string()),
        Error::KeyConflict { .. } => Reply::error(409, error.to_string()),
        Error::Locked { .. } => Reply { retry_after: true, ..Reply::error(503, error.to_string()) },
        _ => Reply::error(500, error.to_string()),
    }
}

pub(super) fn index_error(error: &spex_index::Error) -> Reply {
    match error {
        spex_index::Error::Store(error) => engine_error(error),
        spex_index::Error::EmptyQuery => Reply::error(400, error.to_string()),
        _ => Reply::error(500, error.to_string()),
    }
}

/// The reply for an operation's error: bad input (400), else the engine's or the index's.
pub(super) fn op_error(error: &anyhow::Error) -> Reply {
    if let Some(error) = error.downcast_ref::<Error>() {
        engine_error(error)
    } else if let Some(error) = error.downcast_ref::<spex_index::Error>() {
        index_error(error)
    } else if let Some(error) = error.downcast_ref::<crate::exit::BadInput>() {
        Reply::error(400, error.0.clone())
    } else if let Some(error) = error.downcast_ref::<spex_engine::InvalidId>() {
        Reply::error(400, error.to_string())
    } else {
        Reply::error(500, format!("{error:#}"))
    }
}
