//! Handlers a connection uses to receive traffic it did not ask for: event subscriptions and
//! hook registrations.

use std::time::Duration;

use super::super::connections::{HookRegistration, Subscription, OPTIONAL_HOOK_MEMBERS};
use super::Ctx;
use crate::rpc::errors::RpcError;
use crate::rpc::events::{self, MessageSpec};
use crate::rpc::results::*;
use crate::rpc::types::*;

/// Checks names against a known list and an optional session id against the registry (shared
/// by `subscribe` and `registerHooks`).
fn check_registration<'a>(
    ctx: &Ctx,
    what: &str,
    names: impl IntoIterator<Item = &'a String>,
    known: &[MessageSpec],
    session_id: Option<&String>,
) -> Result<(), RpcError> {
    let known = events::names(known);
    if let Some(bad) = names.into_iter().find(|n| !known.contains(&n.as_str())) {
        return Err(RpcError::invalid_params(format!(
            "unknown {what} {bad:?} (known: {})",
            known.join(", ")
        )));
    }
    if let Some(id) = session_id {
        ctx.daemon.session(id)?;
    }
    Ok(())
}

pub fn subscribe(ctx: &Ctx, p: SubscribeParams) -> Result<SubscribeResult, RpcError> {
    check_registration(
        ctx,
        "event",
        p.events.iter().flatten(),
        events::EVENTS,
        p.session_id.as_ref(),
    )?;
    ctx.conn.subscriptions.lock().push(Subscription {
        session_id: p.session_id,
        events: p.events,
    });
    Ok(SubscribeResult { subscribed: true })
}

pub fn unsubscribe(ctx: &Ctx, _: NoParams) -> Result<UnsubscribeResult, RpcError> {
    ctx.conn.subscriptions.lock().clear();
    Ok(UnsubscribeResult { unsubscribed: true })
}

pub fn register_hooks(ctx: &Ctx, p: RegisterHooksParams) -> Result<RegisterHooksResult, RpcError> {
    check_registration(
        ctx,
        "hook",
        p.hooks.iter(),
        events::HOOKS,
        p.session_id.as_ref(),
    )?;
    if let Some(bad) = p
        .include
        .iter()
        .flatten()
        .find(|m| !OPTIONAL_HOOK_MEMBERS.contains(&m.as_str()))
    {
        return Err(RpcError::invalid_params(format!(
            "unknown include member {bad:?} (known: {})",
            OPTIONAL_HOOK_MEMBERS.join(", ")
        )));
    }
    let cap = ctx.daemon.config.limits.max_hook_timeout_ms;
    let asked = p.timeout_ms.unwrap_or(60_000);
    if asked > cap {
        tracing::warn!(
            connection = ctx.conn.id,
            asked,
            cap,
            "registerHooks.timeoutMs lowered to [limits] max_hook_timeout_ms"
        );
    }
    ctx.conn.hooks.lock().push(HookRegistration {
        include: p.include,
        session_id: p.session_id,
        hooks: p.hooks,
        timeout: Duration::from_millis(asked.min(cap)),
        seq: ctx.daemon.next_hook_seq(),
    });
    Ok(RegisterHooksResult { registered: true })
}
