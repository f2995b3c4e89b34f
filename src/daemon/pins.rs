//! The pinned lane (beyond Pi): instructions and task lists that must survive every compaction.
//! A pin is a Pi `custom` entry (`customType: "compactd.pin"`), so Pi loads the file unchanged
//! and keeps it out of the model's context; compactd itself writes the live pins, verbatim, into
//! a `## Pinned` section of every summary it writes. The model never sees or rewrites them: the
//! section is taken out of the previous summary before summarizing and put back afterwards.

use serde_json::{json, Map, Value};

use super::handlers::Ctx;
use super::session::{custom_entry, SessionState};
use crate::rpc::errors::{ErrorKind, RpcError};
use crate::rpc::results::{AppendResult, PinInfo, PinResult, Pins};
use crate::rpc::types::{PinParams, SessionParams, UnpinParams};
use crate::session::EntryKind;

/// The `customType` of pin and unpin entries.
pub const PIN_TYPE: &str = "compactd.pin";
/// The heading of the section compactd inserts.
pub const HEADING: &str = "\n\n## Pinned\n";

/// One live pin.
#[derive(Debug, Clone, PartialEq)]
pub struct Pin {
    pub pin_id: String,
    pub text: String,
    pub label: Option<String>,
    pub timestamp: Value,
}

/// The pins live at the current leaf: `pin` entries on the branch not undone by a later `unpin`
/// on it, oldest first; and whether the branch has any pin entry at all (then summaries get the
/// section treatment even when no pin is live, so an unpinned text leaves them). O(branch),
/// parsing only `custom` entries.
pub fn live_pins(state: &SessionState) -> (Vec<Pin>, bool) {
    let mut pins: Vec<Pin> = Vec::new();
    let mut used = false;
    for &i in &state.branch {
        let e = state.tree.entry(i);
        if e.kind != EntryKind::Custom {
            continue;
        }
        let v = e.value();
        if v["customType"] != PIN_TYPE {
            continue;
        }
        used = true;
        let data = &v["data"];
        match data["action"].as_str() {
            Some("pin") => {
                let (Some(id), Some(text)) = (e.id_owned(), data["text"].as_str()) else {
                    continue;
                };
                pins.push(Pin {
                    pin_id: id,
                    text: text.to_owned(),
                    label: data["label"].as_str().map(str::to_owned),
                    timestamp: v["timestamp"].clone(),
                });
            }
            Some("unpin") => {
                if let Some(id) = data["pinId"].as_str() {
                    pins.retain(|p| p.pin_id != id);
                }
            }
            _ => {}
        }
    }
    (pins, used)
}

/// The `## Pinned` section for `pins` (empty without pins): each pin's text verbatim, under its
/// label when it has one.
pub fn section(pins: &[Pin]) -> String {
    if pins.is_empty() {
        return String::new();
    }
    let mut out = String::from(HEADING);
    for p in pins {
        out.push('\n');
        if let Some(l) = &p.label {
            out.push_str(&format!("### {l}\n\n"));
        }
        out.push_str(&p.text);
        out.push('\n');
    }
    out.truncate(out.trim_end_matches('\n').len());
    out
}

/// `body` without a `## Pinned` section compactd wrote (from its heading to the file blocks or
/// the end), so a previous summary goes to the model without the pins, and a model's echo of
/// one is dropped before compactd inserts the current pins.
pub fn strip_section(body: &str) -> String {
    let Some(start) = body.find(HEADING) else {
        return body.to_owned();
    };
    let rest = &body[start + HEADING.len()..];
    let end = ["\n\n<read-files>\n", "\n\n<modified-files>\n"]
        .iter()
        .filter_map(|m| rest.find(m))
        .min()
        .map_or(body.len(), |i| start + HEADING.len() + i);
    format!("{}{}", &body[..start], &body[end..])
}

fn pin_entry(id: &str, parent: Option<&str>, ts: &str, data: Value) -> Value {
    custom_entry(
        "custom",
        id,
        parent,
        ts,
        vec![("customType", json!(PIN_TYPE)), ("data", data)],
    )
}

fn pin_info(p: &Pin) -> PinInfo {
    PinInfo {
        pin_id: p.pin_id.clone(),
        text: p.text.clone(),
        label: p.label.clone(),
        timestamp: p.timestamp.clone(),
    }
}

/// `pin`: appends a pin entry; its id is the pin's id.
pub fn pin(ctx: &Ctx, p: PinParams) -> Result<PinResult, RpcError> {
    let session = ctx.daemon.session(&p.session_id)?;
    if p.text.trim().is_empty() {
        return Err(RpcError::invalid_params("text must not be empty"));
    }
    let mut state = session.lock_state();
    session.writable()?;
    let mut data = Map::new();
    data.insert("action".into(), json!("pin"));
    data.insert("text".into(), json!(p.text));
    if let Some(l) = p.label.filter(|l| !l.is_empty()) {
        data.insert("label".into(), json!(l));
    }
    let idx = state.append_with(|id, parent, ts| pin_entry(id, parent, ts, Value::Object(data)))?;
    let id = state.tree.id_at(idx);
    Ok(PinResult {
        pin_id: id.clone(),
        entry_id: id.clone(),
        leaf_id: id,
    })
}

/// `unpin`: appends an unpin entry for a live pin.
pub fn unpin(ctx: &Ctx, p: UnpinParams) -> Result<AppendResult, RpcError> {
    let session = ctx.daemon.session(&p.session_id)?;
    let mut state = session.lock_state();
    session.writable()?;
    if !live_pins(&state).0.iter().any(|x| x.pin_id == p.pin_id) {
        return Err(RpcError::new(
            ErrorKind::EntryNotFound,
            format!("No live pin {} on the current branch", p.pin_id),
        ));
    }
    let data = json!({"action": "unpin", "pinId": p.pin_id});
    let idx = state.append_with(|id, parent, ts| pin_entry(id, parent, ts, data))?;
    let id = state.tree.id_at(idx);
    Ok(AppendResult {
        entry_id: id.clone(),
        leaf_id: id,
    })
}

/// `listPins`: the live pins of the current branch, oldest first.
pub fn list_pins(ctx: &Ctx, p: SessionParams) -> Result<Pins, RpcError> {
    let session = ctx.daemon.session(&p.session_id)?;
    let state = session.lock_state();
    Ok(live_pins(&state).0.iter().map(pin_info).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pin(text: &str, label: Option<&str>) -> Pin {
        Pin {
            pin_id: "p".into(),
            text: text.into(),
            label: label.map(str::to_owned),
            timestamp: Value::Null,
        }
    }

    #[test]
    fn sections_are_verbatim_and_strip_back_out() {
        let pins = [
            pin("Never push to main.\n\n- a\n- b", None),
            pin("Use tabs.", Some("style")),
        ];
        let s = section(&pins);
        assert_eq!(
            s,
            "\n\n## Pinned\n\nNever push to main.\n\n- a\n- b\n\n### style\n\nUse tabs."
        );
        let summary = format!("## Goal\nx{s}\n\n<read-files>\na.rs\n</read-files>");
        assert_eq!(
            strip_section(&summary),
            "## Goal\nx\n\n<read-files>\na.rs\n</read-files>"
        );
        assert_eq!(strip_section(&format!("body{s}")), "body");
        assert_eq!(strip_section("no pins"), "no pins");
        assert_eq!(section(&[]), "");
    }
}
