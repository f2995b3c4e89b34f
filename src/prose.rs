//! What people wrote in a message, as opposed to the code and output they pasted: the lines
//! outside fenced code blocks. The extractive summarizer reads requests and plans from them and
//! the handoff check reads identifiers from them, so both see the same lines.

/// The lines of `text` outside fenced code blocks, the fences left out too: what a block holds
/// is code or output, not what someone said.
pub fn lines_outside_fences(text: &str) -> impl Iterator<Item = &str> {
    let mut in_fence = false;
    text.lines().filter(move |line| {
        if line.trim().starts_with("```") {
            in_fence = !in_fence;
            return false;
        }
        !in_fence
    })
}

#[cfg(test)]
mod tests {
    use super::lines_outside_fences;

    #[test]
    fn fenced_blocks_and_their_fences_are_left_out() {
        let text = "fix the port\n```sh\nPORT=8080 run\n```\nthen ship it\n  ```\nx\n";
        let lines: Vec<&str> = lines_outside_fences(text).collect();
        assert_eq!(lines, ["fix the port", "then ship it"]);
    }
}
