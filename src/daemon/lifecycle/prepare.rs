//! The one preparation of every compaction the daemon runs (manual, threshold, overflow, a
//! speculation, an update on top of a claimed one): Pi's `prepareCompaction` over the live
//! branch, or on top of a speculative compaction placed where it would have been installed,
//! with compactd's own additions taken out of the previous summary.
//!
//! Why one place: the previous summary a model sees must never carry compactd's `## Pinned`
//! section or its recall footer (compactd puts both back itself afterwards, so the model never
//! rewrites the pins and footers never pile up), and what a summary reads of the outputs a
//! clearing pass cleared is the setting's (`clearToolResults.summarizeOriginals`) on every
//! path. A preparation made anywhere else would forget that on one path.

use crate::compaction::prepare::{
    prepare_branch, prepare_on_top, NothingToCompact, NothingToCompactDetail, Preparation,
};
use std::sync::Arc;

use crate::clearing::{self, Cleared};
use crate::compaction::prepare::PreparedMessage;
use crate::session::{Entry, PiVersion};

use super::super::session::SessionState;
use super::super::settings::EffectiveSettings;

/// Pi's refusal, with (beyond Pi) its explanation.
pub(super) type Refusal = (NothingToCompact, Box<NothingToCompactDetail>);

/// The preparation of `state`'s branch as it is now, or why there is nothing to compact.
pub(super) fn of_branch(
    state: &SessionState,
    settings: &EffectiveSettings,
) -> Result<Preparation, Refusal> {
    let view = state.view();
    let pi = &settings.compaction;
    let mut prep = prepare_branch(state.rules, &view, &state.index, pi).map_err(|n| {
        let detail = n.detail(&view, &state.index, pi);
        (n, Box::new(detail))
    })?;
    strip_additions(&mut prep);
    summary_input(&mut prep, settings, &state.cleared);
    Ok(prep)
}

/// The preparation of an update on top of a speculative compaction `virtual_entry` placed after
/// `path[at]` (see [`prepare_on_top`]); `None` when there is nothing more to summarize.
pub(super) fn on_top(
    version: crate::session::PiVersion,
    path: &[&Entry],
    at: usize,
    virtual_entry: &Entry,
    settings: &EffectiveSettings,
) -> Option<Preparation> {
    let mut prep = prepare_on_top(version, path, at, virtual_entry, &settings.compaction).ok()?;
    strip_additions(&mut prep);
    let mut cleared = Cleared::default();
    if version == PiVersion::V0_85 {
        for (i, e) in path.iter().enumerate() {
            cleared.record(i, e);
        }
    }
    summary_input(&mut prep, settings, &cleared);
    Some(prep)
}

/// What the summary reads of the outputs clearing passes cleared (beyond Pi): the originals
/// (`summarizeOriginals`, the default), or their placeholders as the context holds them. Each
/// Pi summarizes what it sees: 0.85 the originals (it ignores `compactd.clear`), 1.6 the
/// projection (the passes are its own edits); the setting picks either under both. Only
/// compactd's own placeholders are touched: another edit of an output is summarized as Pi
/// summarizes it. The cut point and `tokensBefore` stay Pi's. `cleared` is the path's passes
/// under 0.85 (under 1.6 the edits are in the preparation).
pub(crate) fn summary_input(
    prep: &mut Preparation,
    settings: &EffectiveSettings,
    cleared: &Cleared,
) {
    let originals = settings
        .clear_tool_results
        .as_ref()
        .map_or(clearing::DEFAULT_SUMMARIZE_ORIGINALS, |c| {
            c.summarize_originals
        });
    let version = prep.edits.version;
    let each = |m: &mut PreparedMessage| {
        let Some(id) = m.entry.id.clone() else { return };
        match version {
            PiVersion::V1_6 if originals => {
                let placeholder = m
                    .edited
                    .as_ref()
                    .is_some_and(|e| clearing::is_cleared_content(e.get("content"), &id));
                if placeholder {
                    m.edited = None;
                }
            }
            PiVersion::V0_85 if !originals && cleared.covers(&m.entry) => {
                let mut message = m.message();
                if let serde_json::Value::Object(o) = &mut message {
                    clearing::project_message(o, &id, m.entry.tokens);
                }
                m.edited = Some(Arc::new(message));
            }
            _ => {}
        }
    };
    prep.messages_to_summarize.iter_mut().for_each(each);
    prep.turn_prefix_messages.iter_mut().for_each(each);
}

/// Takes compactd's own additions out of a preparation's previous summary: the `## Pinned`
/// section and the recall footer.
pub(crate) fn strip_additions(prep: &mut Preparation) {
    if let Some(prev) = prep.plan.previous_summary.as_mut() {
        if prev.contains(super::super::pins::HEADING) {
            *prev = super::super::pins::strip_section(prev);
        }
        let body = crate::compaction::recall::strip_recall_footer(prev);
        if body.len() != prev.len() {
            *prev = body.to_owned();
        }
    }
}
