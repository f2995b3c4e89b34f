//! The method table: jsonrpsee's `RpcModule` maps method names to the handlers in
//! `crate::daemon::methods`, parses params (wrong types → -32602) and shapes responses. This is
//! the only module that touches jsonrpsee; the connection loop hands it one request's text and
//! gets the response's text back.

use jsonrpsee::types::{ErrorObjectOwned, Params};
use jsonrpsee::RpcModule;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::daemon::methods::{self, Ctx};
use crate::rpc::RpcError;

/// Methods that may wait a long time (LLM calls, hooks): the connection runs them in their own
/// task so it keeps reading (an abort, or the answer to a hook request, must get through).
pub const SLOW_METHODS: [&str; 3] = ["compact", "checkCompaction", "navigateTree"];

fn to_object(e: RpcError) -> ErrorObjectOwned {
    ErrorObjectOwned::owned(e.code, e.message.clone(), Some(e.data()))
}

fn parse<T: DeserializeOwned>(params: &Params<'_>) -> Result<T, ErrorObjectOwned> {
    // Absent params parse as an empty object, so all-optional methods accept no params.
    if params.as_str().is_none() {
        return serde_json::from_value(Value::Object(Default::default()))
            .map_err(|e| to_object(RpcError::invalid_params(format!("missing params: {e}"))));
    }
    if params
        .as_str()
        .is_some_and(|p| p.trim_start().starts_with('['))
    {
        return Err(to_object(RpcError::invalid_params(
            "Invalid params: params must be one JSON object",
        )));
    }
    params.parse::<T>().map_err(|e| {
        let detail = e
            .data()
            .map(|d| d.get().trim_matches('"').to_owned())
            .unwrap_or_default();
        to_object(RpcError::invalid_params(format!(
            "Invalid params: {detail}"
        )))
    })
}

macro_rules! sync_method {
    ($module:ident, $name:literal, $handler:path) => {
        $module
            .register_method($name, |params, ctx, _| {
                let p = parse(&params)?;
                $handler(ctx, p).map_err(to_object)
            })
            .expect("method names are unique");
    };
}

macro_rules! async_method {
    ($module:ident, $name:literal, $handler:path) => {
        $module
            .register_async_method($name, |params, ctx, _| async move {
                let p = parse(&params)?;
                $handler(&ctx, p).await.map_err(to_object)
            })
            .expect("method names are unique");
    };
}

/// A connection's method table.
pub struct Dispatcher {
    module: RpcModule<Ctx>,
}

impl Dispatcher {
    pub fn new(ctx: Ctx) -> Dispatcher {
        let mut m = RpcModule::new(ctx);
        sync_method!(m, "initialize", methods::initialize);
        sync_method!(m, "openSession", methods::open_session);
        sync_method!(m, "createSession", methods::create_session);
        sync_method!(m, "closeSession", methods::close_session);
        m.register_method("listSessions", |_, ctx, _| {
            methods::list_sessions(ctx).map_err(to_object)
        })
        .expect("method names are unique");
        sync_method!(m, "appendMessage", methods::append_message);
        sync_method!(m, "appendEntry", methods::append_entry);
        sync_method!(m, "setModel", methods::set_model);
        async_method!(m, "navigateTree", methods::navigate_tree);
        sync_method!(m, "getBranch", methods::get_branch);
        sync_method!(m, "getContext", methods::get_context);
        sync_method!(m, "getContextUsage", methods::get_context_usage);
        sync_method!(m, "shouldCompact", methods::should_compact_method);
        sync_method!(m, "previewCompaction", methods::preview_compaction);
        async_method!(m, "compact", methods::compact);
        async_method!(m, "checkCompaction", methods::check_compaction);
        sync_method!(m, "abortCompaction", methods::abort_compaction);
        sync_method!(m, "getSettings", methods::get_settings);
        sync_method!(m, "setSettingsOverrides", methods::set_settings_overrides);
        sync_method!(m, "subscribe", methods::subscribe);
        m.register_method("unsubscribe", |_, ctx, _| {
            methods::unsubscribe(ctx).map_err(to_object)
        })
        .expect("method names are unique");
        sync_method!(m, "registerHooks", methods::register_hooks);
        Dispatcher { module: m }
    }

    /// Every method name, for documentation and tests.
    pub fn method_names(&self) -> Vec<&'static str> {
        let mut v: Vec<&'static str> = self.module.method_names().collect();
        v.sort_unstable();
        v
    }

    /// Runs one validated request (an object with `jsonrpc`, `method`, `id`) and returns the
    /// response text. A request jsonrpsee cannot decode is answered with -32600.
    pub async fn call(&self, method: &str, request: &str, id: &Value) -> String {
        if self.module.method(method).is_none() {
            let e = RpcError::new(
                crate::rpc::ErrorKind::MethodNotFound,
                format!("Method not found: {method}"),
            );
            return crate::json::stringify(
                &serde_json::json!({"jsonrpc": "2.0", "id": id, "error": e.to_json()}),
            );
        }
        match self.module.raw_json_request(request, 1).await {
            Ok((response, _)) => response.get().to_owned(),
            Err(e) => crate::json::stringify(&serde_json::json!({
                "jsonrpc": "2.0",
                "id": id,
                "error": RpcError::new(crate::rpc::ErrorKind::InvalidRequest, format!("Invalid request: {e}")).to_json(),
            })),
        }
    }
}
