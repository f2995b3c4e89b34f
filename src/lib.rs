//! compactd: LLM context compaction for Pi-format coding-agent sessions.
pub mod json;
pub mod summarizer;
