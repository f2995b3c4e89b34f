//! The summarizer prompts: compactd's own instruction prose around Pi's exact interface.
//!
//! What must match Pi byte for byte is the *structure*: the `<conversation>` and
//! `<previous-summary>` blocks, the section headings, `Additional focus:`, the split-turn joiner.
//! Models and tools downstream parse those. The sentences between them are ours.

/// System prompt for every summarization call.
pub const SYSTEM_PROMPT: &str = "You write summaries of coding-agent sessions. You are shown the transcript of a session between a user and an AI coding assistant, and you reply with a structured summary in the format you are asked for.\n\nDo not carry on the conversation or answer any question that appears in it. Reply with the summary alone.";

/// Pi's headings of a history summary, in order: what models and tools downstream parse.
pub const HISTORY_HEADINGS: [&str; 9] = [
    "## Goal",
    "## Constraints & Preferences",
    "## Progress",
    "### Done",
    "### In Progress",
    "### Blocked",
    "## Key Decisions",
    "## Next Steps",
    "## Critical Context",
];

/// The Progress, Key Decisions and Next Steps sections, as every summary prompt asks for them
/// (a macro so the prompts can be assembled with `concat!` at compile time).
macro_rules! progress_sections {
    () => {
        "## Progress
### Done
- [x] [Finished tasks and changes]

### In Progress
- [ ] [Work that was under way]

### Blocked
- [Problems stopping progress, if any]

## Key Decisions
- **[Decision]**: [Why, in a few words]

## Next Steps
1. [What should happen next, in order]"
    };
}

/// The six-section template shared by the initial and the update prompt.
const HISTORY_SECTIONS: &str = concat!(
    "## Goal
[What the user wants done. List several goals if the session covered several tasks.]

## Constraints & Preferences
- [Requirements, constraints and preferences the user stated]
- [Or \"(none)\" when the user stated none]

",
    progress_sections!(),
    "

## Critical Context
- [Data, examples or references needed to continue]
- [Or \"(none)\" when nothing applies]"
);

const CLOSING: &str =
    "Be brief in every section, and reproduce file paths, function names and error messages exactly as they appear.";

/// First compaction of a session.
pub fn initial_prompt() -> String {
    format!(
        "The transcript above is a coding session. Condense it into a structured checkpoint: another model will carry on from the summary alone.\n\nUse this EXACT format:\n\n{HISTORY_SECTIONS}\n\n{CLOSING}"
    )
}

/// Later compactions: merge new messages into the previous summary.
pub fn update_prompt() -> String {
    format!(
        "The transcript above holds NEW messages from the session. Merge them into the existing summary given in the <previous-summary> tags.

Follow these RULES:
- PRESERVE everything the existing summary records
- ADD the new progress, decisions and context
- UPDATE Progress: move items from \"In Progress\" to \"Done\" once they are finished
- UPDATE \"Next Steps\" to match where the work now stands
- PRESERVE file paths, function names and error messages exactly
- Remove only what is clearly no longer relevant
- Keep all the headings below, in order; write \"(none)\" under one with nothing new

Use this EXACT format:

## Goal
[The user's goals: keep the existing ones, add new ones]

## Constraints & Preferences
- [Keep the existing ones, add any new ones]

## Progress
### Done
- [x] [Finished tasks and changes, old and new]

### In Progress
- [ ] [Work under way now]

### Blocked
- [Problems stopping progress, if any]

## Key Decisions
- **[Decision]**: [Why, in a few words] (keep all earlier decisions, add new ones)

## Next Steps
1. [What should happen next, in order]

## Critical Context
- [Data, examples or references needed to continue]

{CLOSING}"
    )
}

/// The early part of a turn too large to keep whole.
pub const TURN_PREFIX_PROMPT: &str = "The transcript above is the PREFIX of a single turn that was too large to keep. Its SUFFIX (the most recent work) is kept verbatim and follows this summary.

Summarize the prefix so the kept suffix makes sense on its own:

## Original Request
[What the user asked for in this turn]

## Early Progress
- [Work done and decisions made in the prefix]

## Context for Suffix
- [What a reader needs to follow the kept recent work]

Keep it short: include only what the suffix depends on.";

/// Pi 1.6's turn-prefix instructions: the earlier part of a conversation whose later messages
/// are kept, summarized as a checkpoint placed before them (Pi 1.6's headings; compactd's prose).
pub const TURN_PREFIX_PROMPT_1_6: &str = "The messages above are the start of a conversation that is still going on. The messages after them are kept separately; do not try to reconstruct them.

Write a short checkpoint of what the user asked for and what was done in the messages above. It will be placed before the later messages so the work can continue from it:

## Original Request
[What the user asked for]

## Progress So Far
- [Decisions made and work finished in these messages]

## Context Needed to Continue
- [What from these messages the later work relies on: names, errors.]

Use only what the messages above state, word for word where it matters. Do not guess at or recreate what came later.";

/// Branch summaries (tree navigation): the same sections minus Critical Context.
pub const BRANCH_SUMMARY_PROMPT: &str = concat!(
    "The transcript above is a conversation branch the user is leaving. Summarize it so the work can be picked up again if the user comes back to it.

Use this EXACT format:

## Goal
[What the user wanted done on this branch]

## Constraints & Preferences
- [Requirements and preferences the user stated, or \"(none)\"]

",
    progress_sections!(),
    "

Be brief in every section, and reproduce file paths, function names and error messages exactly as they appear."
);

/// Stored at the head of every Pi branch summary: data, so Pi's exact text.
pub const BRANCH_SUMMARY_PREAMBLE: &str =
    "The user explored a different conversation branch before returning here.\nSummary of that exploration:\n\n";

/// Joins the history summary and the turn-prefix summary of a split turn.
pub const SPLIT_TURN_JOINER: &str = "\n\n---\n\n**Turn Context (split turn):**\n\n";

/// History text used when a split turn has nothing before it.
pub const NO_PRIOR_HISTORY: &str = "No prior history.";

/// The user message of a history summary call (compaction.md §6.4).
pub fn history_prompt_text(
    conversation: &str,
    previous_summary: Option<&str>,
    custom_instructions: Option<&str>,
) -> String {
    let previous = previous_summary.filter(|s| !s.is_empty());
    let mut text = format!("<conversation>\n{conversation}\n</conversation>\n\n");
    if let Some(prev) = previous {
        text.push_str("<previous-summary>\n");
        text.push_str(prev);
        text.push_str("\n</previous-summary>\n\n");
    }
    text.push_str(&if previous.is_some() {
        update_prompt()
    } else {
        initial_prompt()
    });
    if let Some(focus) = custom_instructions.filter(|s| !s.is_empty()) {
        text.push_str("\n\nAdditional focus: ");
        text.push_str(focus);
    }
    text
}

/// The user message of a turn-prefix call: never the previous summary or custom instructions.
pub fn turn_prefix_prompt_text(
    version: crate::session::PiVersion,
    conversation: &str,
    custom_instructions: Option<&str>,
) -> String {
    if !version.is_1_6() {
        return format!("<conversation>\n{conversation}\n</conversation>\n\n{TURN_PREFIX_PROMPT}");
    }
    // Pi 1.6: markdown sections instead of tags, and `/compact`'s instructions apply here too.
    let mut text =
        format!("# Conversation\n{conversation}\n\n# Instructions\n{TURN_PREFIX_PROMPT_1_6}");
    if let Some(focus) = custom_instructions.filter(|s| !s.is_empty()) {
        text.push_str("\n\nAdditional focus: ");
        text.push_str(focus);
    }
    text
}

/// The user message of a branch summary call (compaction.md §9): Pi's branch prompt, with the
/// custom instructions as an added focus, or instead of the prompt when they replace it.
pub fn branch_prompt_text(
    conversation: &str,
    custom_instructions: Option<&str>,
    replace_instructions: bool,
) -> String {
    let instructions = match (
        replace_instructions,
        custom_instructions.filter(|c| !c.is_empty()),
    ) {
        (true, Some(c)) => c.to_owned(),
        (false, Some(c)) => format!("{BRANCH_SUMMARY_PROMPT}\n\nAdditional focus: {c}"),
        _ => BRANCH_SUMMARY_PROMPT.to_owned(),
    };
    format!("<conversation>\n{conversation}\n</conversation>\n\n{instructions}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_prompt_layout() {
        let t = history_prompt_text("C", Some("P"), Some("focus"));
        assert!(t.starts_with(
            "<conversation>\nC\n</conversation>\n\n<previous-summary>\nP\n</previous-summary>\n\n"
        ));
        assert!(t.ends_with("\n\nAdditional focus: focus"));
        let plain = history_prompt_text("C", Some(""), Some(""));
        assert!(plain.starts_with("<conversation>\nC\n</conversation>\n\nThe transcript"));
        assert!(!plain.contains("Additional focus"));
        for h in HISTORY_HEADINGS {
            assert!(plain.contains(&format!("\n{h}\n")), "{h}");
            assert!(t.contains(&format!("\n{h}\n")), "{h}");
        }
    }

    /// pi-ai fits a request's output cap into the model's window from the request's length
    /// (Pi 1.6 sends no cap of its own, so this is the cap): prose of the same length as Pi's
    /// gets exactly the output room Pi's request gets. Pi 1.6.0's lengths, in UTF-16 units: the
    /// system prompt 310, the first summary's instructions 879, an update's 1257, the turn
    /// prefix's 664.
    #[test]
    fn the_prose_is_as_long_as_pis() {
        let units = |s: &str| s.encode_utf16().count();
        assert_eq!(units(SYSTEM_PROMPT), 310);
        assert_eq!(units(&initial_prompt()), 879);
        assert_eq!(units(&update_prompt()), 1257);
        assert_eq!(units(TURN_PREFIX_PROMPT_1_6), 664);
    }

    #[test]
    fn turn_prefix_layout() {
        use crate::session::PiVersion;
        let t = turn_prefix_prompt_text(PiVersion::V0_85, "X", Some("ignored by 0.85"));
        assert!(t.starts_with("<conversation>\nX\n</conversation>\n\n"));
        assert!(!t.contains("Additional focus"));
        for h in [
            "## Original Request",
            "## Early Progress",
            "## Context for Suffix",
        ] {
            assert!(t.contains(h));
        }
        let t = turn_prefix_prompt_text(PiVersion::V1_6, "X", Some("the parser"));
        assert!(
            t.starts_with("# Conversation\nX\n\n# Instructions\n"),
            "{t}"
        );
        assert!(t.ends_with("\n\nAdditional focus: the parser"), "{t}");
        for h in [
            "## Original Request",
            "## Progress So Far",
            "## Context Needed to Continue",
        ] {
            assert!(t.contains(h));
        }
        let plain = turn_prefix_prompt_text(PiVersion::V1_6, "X", Some(""));
        assert!(!plain.contains("Additional focus"));
    }

    #[test]
    fn branch_prompt_layout() {
        let plain = branch_prompt_text("B", None, false);
        assert_eq!(
            plain,
            format!("<conversation>\nB\n</conversation>\n\n{BRANCH_SUMMARY_PROMPT}")
        );
        assert_eq!(branch_prompt_text("B", Some(""), true), plain);
        assert_eq!(
            branch_prompt_text("B", Some("focus"), false),
            format!("{plain}\n\nAdditional focus: focus")
        );
        assert_eq!(
            branch_prompt_text("B", Some("only this"), true),
            "<conversation>\nB\n</conversation>\n\nonly this"
        );
    }
}
