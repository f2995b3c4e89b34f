//! The method table, generated from the one list in `crate::rpc::methods`: each name mapped to
//! its handler in `crate::daemon`. The connection loop parses a frame once into a [`Message`];
//! this table parses that message's params once into the declared params type (wrong or missing
//! fields → -32602 naming the field path), runs the handler and serializes the declared result
//! type. No JSON-RPC library sits in between: framing,
//! classification and parameter decoding are ours end to end.
//!
//! [`Message`]: super::message::Message

use std::future::Future;
use std::pin::Pin;

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use tracing::Instrument;

use super::message::RequestId;

use crate::daemon::{self, handlers::Ctx};
use crate::rpc::methods::{for_each_method, Run};
use crate::rpc::{results, types, ErrorKind, RpcError};

type Reply = Result<Value, RpcError>;
type BoxReply = Pin<Box<dyn Future<Output = Reply> + Send + 'static>>;

/// How a method runs.
#[derive(Clone, Copy)]
pub enum Handler {
    /// Answers at once; the connection runs it inline, in arrival order.
    Sync(fn(&Ctx, Option<Value>) -> Reply),
    /// Inline, in arrival order, but awaited: it may wait on the storage without holding a
    /// worker thread ([`Run::Awaited`]).
    Awaited(fn(Ctx, Option<Value>) -> BoxReply),
    /// May wait a long time (LLM calls, hooks): the connection runs it in its own task so it
    /// keeps reading (an abort, or the answer to a hook request, must get through).
    Slow(fn(Ctx, Option<Value>) -> BoxReply),
}

/// Decodes a method's params. Absent params, `null`, `{}` and `[]` (how Neovim encodes an empty
/// table) all mean "no params"; any other array is refused, since every method takes named
/// params. Errors name the field path (`model.contextWindow`) and never carry serde positions.
pub fn parse<T: DeserializeOwned>(params: Option<Value>) -> Result<T, RpcError> {
    let value = match params {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(Value::Array(a)) if a.is_empty() => Value::Object(Map::new()),
        Some(Value::Array(_)) => {
            return Err(RpcError::invalid_params(
                "params must be one JSON object of named fields, not a positional array",
            ))
        }
        Some(v) => v,
    };
    types::decode(value, "")
}

/// A handler's typed result as the reply's JSON. The annotation is what ties a handler to the
/// result type its declaration names.
fn reply<R: results::IntoReply>(result: Result<R, RpcError>) -> Reply {
    result?
        .into_reply()
        .map_err(|e| RpcError::new(ErrorKind::Internal, e.to_string()))
}

macro_rules! table {
    ($(
        $(#[doc = $doc:literal])+
        $name:literal => $($handler:ident)::+ ($params:ident) -> $result:ident,
            $run:ident, $scope:ident, [$($error:ident),*];
    )*) => {
        /// Every method and its handler, from the one list in `crate::rpc::methods`.
        const METHODS: &[(&str, Handler)] = &[
            $( ($name, table!(@handler $run, $scope, $($handler)::+, $params, $result)) ),*
        ];

        /// The session a request acts on, read through its declared params type (a method
        /// declared `Session` names it in its typed `session_id`): the work a client's cancel
        /// or disconnect aborts. `None` for `Global` methods and params that do not parse.
        pub fn session_of(method: &str, params: Option<&Value>) -> Option<String> {
            match method {
                $( $name => table!(@session $scope, $params, params), )*
                _ => None,
            }
        }
    };
    (@session Session, $params:ident, $p:ident) => {
        parse::<types::$params>($p.cloned()).ok().map(|p| p.session_id)
    };
    (@session Narrowed, $params:ident, $p:ident) => {
        parse::<types::$params>($p.cloned()).ok().and_then(|p| p.session_id)
    };
    (@session Global, $params:ident, $p:ident) => {{
        let _ = $p;
        None
    }};
    (@record Session, $params:ident) => {
        record_session(&$params.session_id)
    };
    (@record Narrowed, $params:ident) => {
        if let Some(id) = &$params.session_id {
            record_session(id)
        }
    };
    (@record Global, $params:ident) => {};
    (@handler $run:ident, $scope:ident, $($handler:ident)::+, $params:ident, $result:ident) => {
        table!(@run $run, $($handler)::+, params, {
            let params: types::$params = parse(params)?;
            table!(@record $scope, params);
            params
        }, $result)
    };
    (@run Inline, $($handler:ident)::+, $p:ident, $decode:block, $result:ident) => {
        Handler::Sync(|ctx, $p| {
            let params = $decode;
            reply::<results::$result>(daemon::$($handler)::+(ctx, params))
        })
    };
    (@run Awaited, $($handler:ident)::+, $p:ident, $decode:block, $result:ident) => {
        Handler::Awaited(|ctx, $p| {
            Box::pin(async move {
                let params = $decode;
                reply::<results::$result>(daemon::$($handler)::+(&ctx, params).await)
            })
        })
    };
    (@run Task, $($handler:ident)::+, $p:ident, $decode:block, $result:ident) => {
        Handler::Slow(|ctx, $p| {
            Box::pin(async move {
                let params = $decode;
                reply::<results::$result>(daemon::$($handler)::+(&ctx, params).await)
            })
        })
    };
}

for_each_method!(table);

/// Names the session a request acts on in its `request` span (the current one while a handler
/// runs), read from the typed params of a method declared `Session` (or `Narrowed`, when it
/// names one).
fn record_session(session_id: &str) {
    let span = tracing::Span::current();
    if !span.is_disabled() {
        span.record("session", &*crate::rpc::for_log(session_id));
    }
}

/// Looks a method up (for every message: a hash map built once, not a scan of the table).
pub fn handler(method: &str) -> Option<Handler> {
    static BY_NAME: std::sync::LazyLock<foldhash::HashMap<&'static str, Handler>> =
        std::sync::LazyLock::new(|| METHODS.iter().copied().collect());
    BY_NAME.get(method).copied()
}

/// Whether `method` runs in its own task (declared [`Run::Task`]).
pub fn is_slow(method: &str) -> bool {
    crate::rpc::methods::spec(method).is_some_and(|m| m.run == Run::Task)
}

/// The error for a name that is not in the table.
pub fn method_not_found(method: &str) -> RpcError {
    RpcError::new(
        ErrorKind::MethodNotFound,
        format!("Method not found: {method}"),
    )
}

/// A connection's method table, bound to its caller context.
pub struct Dispatcher {
    ctx: Ctx,
}

impl Dispatcher {
    pub fn new(ctx: Ctx) -> Dispatcher {
        Dispatcher { ctx }
    }

    pub fn ctx(&self) -> &Ctx {
        &self.ctx
    }

    /// Every method name, for documentation and tests.
    pub fn method_names(&self) -> Vec<&'static str> {
        let mut v: Vec<&'static str> = METHODS.iter().map(|(n, _)| *n).collect();
        v.sort_unstable();
        v
    }

    /// Runs one request (`id`; `None` for a notification) to completion, slow methods
    /// included (the caller decides where), inside a `request` span naming the method, the id
    /// and (recorded by the handler from its typed params) the session: every log line of the
    /// handler, the compaction it runs included, carries them. Its end is logged at `debug`
    /// with the duration.
    pub async fn call(&self, id: Option<&RequestId>, method: &str, params: Option<Value>) -> Reply {
        let Some(handler) = handler(method) else {
            return Err(method_not_found(method));
        };
        let span = tracing::info_span!(
            "request",
            method,
            id = tracing::field::Empty,
            session = tracing::field::Empty
        );
        if let Some(id) = id {
            span.record("id", tracing::field::display(id));
        }
        let started = std::time::Instant::now();
        let reply = async {
            match handler {
                Handler::Sync(f) => f(&self.ctx, params),
                Handler::Awaited(f) | Handler::Slow(f) => f(self.ctx.clone(), params).await,
            }
        }
        .instrument(span.clone())
        .await;
        span.in_scope(|| {
            let elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
            match &reply {
                Ok(_) => tracing::debug!(elapsed_ms, "request done"),
                Err(e) => {
                    tracing::debug!(elapsed_ms, code = e.code, error = %e.message, "request failed")
                }
            }
        });
        reply
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpc::types::{CreateSessionParams, InitializeParams, OpenSessionParams};
    use serde_json::json;

    #[test]
    fn empty_params_in_every_spelling_mean_no_params() {
        for p in [None, Some(Value::Null), Some(json!([])), Some(json!({}))] {
            let r: Result<InitializeParams, _> = parse(p.clone());
            assert!(r.is_ok(), "{p:?}");
        }
        let r: Result<InitializeParams, _> = parse(Some(json!([1])));
        assert!(r.unwrap_err().message.contains("positional array"));
    }

    #[test]
    fn errors_name_the_field_path_without_positions() {
        let e = parse::<CreateSessionParams>(None).unwrap_err();
        assert_eq!(e.message, "Invalid params: missing field `cwd`");
        let e = parse::<OpenSessionParams>(Some(
            json!({"path": "/x", "model": {"provider": "p", "id": "i", "maxTokens": 1}}),
        ))
        .unwrap_err();
        assert_eq!(
            e.message,
            "Invalid params: missing field `model.contextWindow`"
        );
        let e = parse::<OpenSessionParams>(Some(json!({"path": "/x", "model": {"provider": "p", "id": "i", "contextWindow": "big", "maxTokens": 1}})))
        .unwrap_err();
        assert_eq!(
            e.message,
            "Invalid params: model.contextWindow: invalid type: string \"big\", expected i64"
        );
        assert!(!e.message.contains("line 1"));
    }
}
