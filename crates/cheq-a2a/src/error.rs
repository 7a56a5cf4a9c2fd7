//! The bridge's errors and the one place where each becomes a JSON-RPC
//! error (A2A 1.0 §9.5 and §5.4 "Error Code Mappings"): the standard
//! JSON-RPC codes, A2A's own from -32001, each A2A error with a
//! `google.rpc.ErrorInfo` detail naming its reason, as the A2A SDKs read it.

use serde_json::{json, Value};

/// The domain of the `google.rpc.ErrorInfo` details (A2A 1.0 §9.5).
pub const ERROR_DOMAIN: &str = "a2a-protocol.org";

/// Why a JSON-RPC request was not served.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum A2aError {
    /// The body is not JSON.
    #[error("invalid JSON payload")]
    Parse,
    /// JSON, but not one JSON-RPC 2.0 request object.
    #[error("not a JSON-RPC 2.0 request: {0}")]
    InvalidRequest(&'static str),
    /// No such method.
    #[error("method not found: {0}")]
    MethodNotFound(String),
    /// The method's parameters are not valid.
    #[error("invalid parameters: {0}")]
    InvalidParams(String),
    /// No task with this id for this client (unknown, another client's, or
    /// finished and forgotten).
    #[error("task not found: no task with this id for this client (unknown, another client's, or finished over an hour ago and forgotten)")]
    TaskNotFound,
    /// The task is already in a terminal state.
    #[error("the task is in a terminal state and cannot be canceled")]
    TaskNotCancelable,
    /// Push notifications are not offered.
    #[error("push notifications are not supported by this agent")]
    PushNotSupported,
    /// A known operation this agent does not offer, or one on a task in a
    /// terminal state.
    #[error("unsupported operation: {0}")]
    Unsupported(&'static str),
    /// The `A2A-Version` asked for is not 1.0.
    #[error("A2A version {0} is not supported: this agent speaks A2A 1.0 (send the header A2A-Version: 1.0)")]
    VersionNotSupported(String),
    /// Too many tasks are kept.
    #[error("too many tasks are pending at this bridge; try again later")]
    Busy,
    /// The bridge could not keep a new task (its store failed); nothing
    /// was called.
    #[error("the bridge could not keep the task (its store is unavailable); nothing was called, try again later")]
    Unavailable,
}

impl A2aError {
    /// The JSON-RPC code, and the `ErrorInfo` reason when A2A defines one.
    pub fn code(&self) -> (i32, Option<&'static str>) {
        match self {
            A2aError::Parse => (-32700, None),
            A2aError::InvalidRequest(_) => (-32600, Some("INVALID_REQUEST")),
            A2aError::MethodNotFound(_) => (-32601, Some("METHOD_NOT_FOUND")),
            A2aError::InvalidParams(_) => (-32602, Some("INVALID_PARAMS")),
            A2aError::Busy | A2aError::Unavailable => (-32603, Some("INTERNAL")),
            A2aError::TaskNotFound => (-32001, Some("TASK_NOT_FOUND")),
            A2aError::TaskNotCancelable => (-32002, Some("TASK_NOT_CANCELABLE")),
            A2aError::PushNotSupported => (-32003, Some("PUSH_NOTIFICATION_NOT_SUPPORTED")),
            A2aError::Unsupported(_) => (-32004, Some("UNSUPPORTED_OPERATION")),
            A2aError::VersionNotSupported(_) => (-32009, Some("VERSION_NOT_SUPPORTED")),
        }
    }

    /// The JSON-RPC error object.
    pub fn to_error_object(&self) -> Value {
        let (code, reason) = self.code();
        let mut error = json!({"code": code, "message": self.to_string()});
        if let Some(reason) = reason {
            error["data"] = json!([{
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": reason,
                "domain": ERROR_DOMAIN,
            }]);
        }
        error
    }

    /// The whole JSON-RPC error response to the request `id` (`null` when
    /// the request's id could not be read).
    pub fn response(&self, id: &Value) -> Value {
        json!({"jsonrpc": "2.0", "id": id, "error": self.to_error_object()})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(e: A2aError, code: i32, reason: Option<&str>) {
        let r = e.response(&json!(7));
        assert_eq!(r["jsonrpc"], "2.0");
        assert_eq!(r["id"], 7);
        assert_eq!(r["error"]["code"], code, "{e:?}");
        assert_eq!(r["error"]["message"], e.to_string());
        match reason {
            Some(reason) => {
                assert_eq!(r["error"]["data"][0]["reason"], reason, "{e:?}");
                assert_eq!(
                    r["error"]["data"][0]["@type"],
                    "type.googleapis.com/google.rpc.ErrorInfo"
                );
            }
            None => assert!(r["error"].get("data").is_none(), "{r}"),
        }
    }

    #[test]
    fn parse_error_is_32700() {
        check(A2aError::Parse, -32700, None);
    }

    #[test]
    fn invalid_request_is_32600() {
        check(
            A2aError::InvalidRequest("no method"),
            -32600,
            Some("INVALID_REQUEST"),
        );
    }

    #[test]
    fn method_not_found_is_32601() {
        check(
            A2aError::MethodNotFound("x".into()),
            -32601,
            Some("METHOD_NOT_FOUND"),
        );
    }

    #[test]
    fn invalid_params_is_32602() {
        check(
            A2aError::InvalidParams("x".into()),
            -32602,
            Some("INVALID_PARAMS"),
        );
    }

    #[test]
    fn busy_is_an_internal_error() {
        check(A2aError::Busy, -32603, Some("INTERNAL"));
    }

    #[test]
    fn an_unavailable_store_is_an_internal_error() {
        check(A2aError::Unavailable, -32603, Some("INTERNAL"));
    }

    #[test]
    fn task_not_found_is_32001() {
        check(A2aError::TaskNotFound, -32001, Some("TASK_NOT_FOUND"));
    }

    #[test]
    fn task_not_cancelable_is_32002() {
        check(
            A2aError::TaskNotCancelable,
            -32002,
            Some("TASK_NOT_CANCELABLE"),
        );
    }

    #[test]
    fn push_not_supported_is_32003() {
        check(
            A2aError::PushNotSupported,
            -32003,
            Some("PUSH_NOTIFICATION_NOT_SUPPORTED"),
        );
    }

    #[test]
    fn unsupported_is_32004() {
        check(
            A2aError::Unsupported("x"),
            -32004,
            Some("UNSUPPORTED_OPERATION"),
        );
    }

    #[test]
    fn version_not_supported_is_32009() {
        check(
            A2aError::VersionNotSupported("0.3".into()),
            -32009,
            Some("VERSION_NOT_SUPPORTED"),
        );
    }

    #[test]
    fn an_unreadable_id_is_answered_with_null() {
        assert_eq!(A2aError::Parse.response(&Value::Null)["id"], Value::Null);
    }
}
