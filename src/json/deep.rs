//! Values nested deeper than compactd holds as values: kept as their `JSON.stringify` text.
//!
//! Pi reads a line nested to any depth (a tool result's `details` 100 000 levels deep loads).
//! A `serde_json::Value` recurses once per level to be parsed, cloned, compared, dropped and
//! written, so a deep line held as one would overflow a thread's stack. So every container
//! that opens deeper than [`HELD_DEPTH`] is replaced, when a line is read
//! ([`super::parse_line`]), by a *deep string*: a string holding this process's tag and the
//! container's `JSON.stringify` text, made here without recursion (the container is parsed
//! into a flat list of nodes with an explicit stack and written back with another). The value
//! that remains is at most [`HELD_DEPTH`] + 1 deep, and a deep string costs no more to drop or
//! clone than any string.
//!
//! Nothing Pi computes looks that deep: its algorithms read a message's top fields, and reach
//! deep values only through `JSON.stringify` (a tool call's arguments in the estimate and the
//! summarizer's serialization, a message sent back to a client, a line compactd writes). Those
//! all go through [`super::write_js`] and [`super::stringify_len`], which write and measure a
//! deep string's text in its place, so what they produce is Pi's, byte for byte.
//!
//! The tag is a private-use character (U+10FFFF) and a random token made once per process: a
//! string a client or a file sends cannot pass for a deep string (it would be written raw),
//! because the token never leaves the process — every way out writes the text, not the tag.

use std::collections::HashMap;
use std::sync::OnceLock;

/// Containers nested deeper than this are kept as text ([`text`]); serde_json's own recursion
/// limit (128) is never reached by what remains.
pub const HELD_DEPTH: usize = 100;

/// Text that is not JSON (a malformed line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

/// This process's tag of deep strings (module docs).
fn tag() -> &'static str {
    static TAG: OnceLock<String> = OnceLock::new();
    TAG.get_or_init(|| format!("\u{10FFFF}{}:", uuid::Uuid::new_v4().simple()))
}

/// The `JSON.stringify` text a deep string stands for; `None` for any other string.
#[inline]
pub fn text(s: &str) -> Option<&str> {
    // U+10FFFF starts with 0xF4: other strings are told apart by their first byte.
    if s.as_bytes().first() != Some(&0xF4) {
        return None;
    }
    s.strip_prefix(tag())
}

/// A deep string holding `json`, the `JSON.stringify` text of a container.
fn deep_string(json: &str) -> String {
    let mut s = String::with_capacity(tag().len() + json.len());
    s.push_str(tag());
    s.push_str(json);
    s
}

/// `line` with every container that opens deeper than [`HELD_DEPTH`] replaced by a deep
/// string's literal, or `None` when the line is not that deep. A deep part that is not JSON is
/// [`Malformed`]; the rest of the line is left for the caller's parse to judge.
pub(crate) fn shallow(line: &str) -> Result<Option<String>, Malformed> {
    let bytes = line.as_bytes();
    let mut out = String::new();
    let (mut i, mut copied, mut depth) = (0usize, 0usize, 0usize);
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                i = string_end(bytes, i)?;
                continue;
            }
            b'[' | b'{' if depth == HELD_DEPTH => {
                let end = container_end(bytes, i)?;
                let json = stringify_text(&line[i..end])?;
                out.push_str(&line[copied..i]);
                super::write_string(&mut out, &deep_string(&json));
                copied = end;
                i = end;
                continue;
            }
            b'[' | b'{' => depth += 1,
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    if copied == 0 {
        return Ok(None);
    }
    out.push_str(&line[copied..]);
    Ok(Some(out))
}

/// The index just past the string literal opening at `at` (escapes skipped, not checked).
fn string_end(b: &[u8], at: usize) -> Result<usize, Malformed> {
    let mut i = at + 1;
    while let Some(&c) = b.get(i) {
        match c {
            b'"' => return Ok(i + 1),
            b'\\' => i += 2,
            _ => i += 1,
        }
    }
    Err(Malformed)
}

/// The index just past the container opening at `at` (brackets counted, strings skipped; the
/// kinds of brackets are checked by the parse that follows).
fn container_end(b: &[u8], at: usize) -> Result<usize, Malformed> {
    let (mut i, mut depth) = (at, 0usize);
    while let Some(&c) = b.get(i) {
        match c {
            b'"' => {
                i = string_end(b, i)?;
                continue;
            }
            b'[' | b'{' => depth += 1,
            b']' | b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Ok(i + 1);
                }
            }
            _ => {}
        }
        i += 1;
    }
    Err(Malformed)
}

/// One node of a parsed container, children by index: nothing here recurses to drop.
enum Node {
    /// A string, number or literal, as `JSON.stringify` writes it.
    Scalar(String),
    Array(Vec<usize>),
    /// Members as written (decoded key, value); duplicates are resolved when written.
    Object(Vec<(String, usize)>),
}

/// An open container while parsing: its node and, in an object, the key its next value takes.
struct Open {
    node: usize,
    key: Option<String>,
}

fn ws(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// The string literal at `at`, decoded, and the index past it.
fn literal(src: &str, at: usize) -> Result<(String, usize), Malformed> {
    let end = string_end(src.as_bytes(), at)?;
    let s: String = serde_json::from_str(&src[at..end]).map_err(|_| Malformed)?;
    Ok((s, end))
}

/// `JSON.stringify(JSON.parse(src))` for the text of one value (lone surrogates and numbers
/// beyond `f64` already carried, see [`super::parse_line`]), without recursion: the value is
/// parsed into a flat list of nodes, then written with an explicit stack, each object's keys in
/// JavaScript's order (array indices first, a duplicated key's last value at its first place).
pub(crate) fn stringify_text(src: &str) -> Result<String, Malformed> {
    let b = src.as_bytes();
    let mut nodes: Vec<Node> = Vec::new();
    let mut open: Vec<Open> = Vec::new();
    let mut i = ws(b, 0);
    let root = 'value: loop {
        // A value starts at `i`.
        let mut done = match b.get(i) {
            Some(&c @ (b'[' | b'{')) => {
                let node = nodes.len();
                nodes.push(if c == b'[' {
                    Node::Array(Vec::new())
                } else {
                    Node::Object(Vec::new())
                });
                i = ws(b, i + 1);
                let close = if c == b'[' { b']' } else { b'}' };
                if b.get(i) == Some(&close) {
                    i += 1;
                    node
                } else {
                    let key = if c == b'{' {
                        let (k, next) = key_and_colon(src, i)?;
                        i = next;
                        Some(k)
                    } else {
                        None
                    };
                    open.push(Open { node, key });
                    continue 'value;
                }
            }
            Some(b'"') => {
                let (s, end) = literal(src, i)?;
                let mut text = String::with_capacity(end - i);
                super::write_string(&mut text, &s);
                i = end;
                nodes.push(Node::Scalar(text));
                nodes.len() - 1
            }
            Some(_) => {
                let end = b[i..]
                    .iter()
                    .position(|c| !matches!(c, b'-' | b'+' | b'.' | b'0'..=b'9' | b'a'..=b'z' | b'A'..=b'Z'))
                    .map_or(b.len(), |n| i + n);
                let token = &src[i..end];
                let text = match token {
                    "true" | "false" | "null" => token.to_owned(),
                    _ => {
                        let n: serde_json::Number =
                            serde_json::from_str(token).map_err(|_| Malformed)?;
                        let mut t = String::new();
                        super::write_number(&mut t, &n);
                        t
                    }
                };
                i = end;
                nodes.push(Node::Scalar(text));
                nodes.len() - 1
            }
            None => return Err(Malformed),
        };
        // A value ended at `i`: it goes into the innermost open container, which either takes
        // another value or closes (and is itself a value that ended).
        loop {
            let Some(top) = open.last_mut() else {
                break 'value done;
            };
            match &mut nodes[top.node] {
                Node::Array(items) => items.push(done),
                Node::Object(members) => members.push((top.key.take().unwrap_or_default(), done)),
                Node::Scalar(_) => return Err(Malformed),
            }
            let is_object = matches!(nodes[top.node], Node::Object(_));
            i = ws(b, i);
            match b.get(i) {
                Some(b',') => {
                    i = ws(b, i + 1);
                    if is_object {
                        let (k, next) = key_and_colon(src, i)?;
                        top.key = Some(k);
                        i = next;
                    }
                    continue 'value;
                }
                Some(b']') if !is_object => {}
                Some(b'}') if is_object => {}
                _ => return Err(Malformed),
            }
            i += 1;
            done = top.node;
            open.pop();
        }
    };
    if ws(b, i) != b.len() {
        return Err(Malformed);
    }
    Ok(write(&nodes, root))
}

/// The key literal at `i`, then `:`; returns the decoded key and the index of its value.
fn key_and_colon(src: &str, i: usize) -> Result<(String, usize), Malformed> {
    let b = src.as_bytes();
    if b.get(i) != Some(&b'"') {
        return Err(Malformed);
    }
    let (k, end) = literal(src, i)?;
    let colon = ws(b, end);
    if b.get(colon) != Some(&b':') {
        return Err(Malformed);
    }
    Ok((k, ws(b, colon + 1)))
}

/// What is left to write: a node, or punctuation and keys between nodes.
enum Work<'a> {
    Node(usize),
    Text(&'a str),
    Key(&'a str, bool),
}

/// Writes `root` as `JSON.stringify` does, with an explicit stack.
fn write(nodes: &[Node], root: usize) -> String {
    let mut out = String::new();
    let mut work = vec![Work::Node(root)];
    while let Some(w) = work.pop() {
        match w {
            Work::Text(t) => out.push_str(t),
            Work::Key(k, first) => {
                if !first {
                    out.push(',');
                }
                super::write_string(&mut out, k);
                out.push(':');
            }
            Work::Node(n) => match &nodes[n] {
                Node::Scalar(t) => out.push_str(t),
                Node::Array(items) => {
                    out.push('[');
                    work.push(Work::Text("]"));
                    for (k, &item) in items.iter().enumerate().rev() {
                        work.push(Work::Node(item));
                        if k > 0 {
                            work.push(Work::Text(","));
                        }
                    }
                }
                Node::Object(members) => {
                    out.push('{');
                    work.push(Work::Text("}"));
                    let ordered = js_order(members);
                    for (k, (key, value)) in ordered.into_iter().enumerate().rev() {
                        work.push(Work::Node(value));
                        work.push(Work::Key(key, k == 0));
                    }
                }
            },
        }
    }
    out
}

/// An object's members as `JSON.parse` then `JSON.stringify` see them: a duplicated key keeps
/// its first place and its last value; array-index keys come first, in numeric order.
fn js_order(members: &[(String, usize)]) -> Vec<(&str, usize)> {
    let mut out: Vec<(&str, usize)> = Vec::with_capacity(members.len());
    let mut at: HashMap<&str, usize> = HashMap::new();
    for (k, v) in members {
        match at.get(k.as_str()) {
            Some(&slot) => out[slot].1 = *v,
            None => {
                at.insert(k, out.len());
                out.push((k, *v));
            }
        }
    }
    if out.iter().any(|(k, _)| super::is_array_index(k).is_some()) {
        // Stable: named keys keep their order after the indices.
        out.sort_by_key(|(k, _)| super::is_array_index(k).map_or((1, 0), |n| (0, n)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn the_text_of_a_value_is_json_stringify_of_it() {
        for src in [
            r#"{"b":1,"2":[true,false,null],"a":{"x":"\u0041\n"},"1":-0,"b":2.50}"#,
            "[ 1E2 , \"\\/\" , {} , [] , 12345678901234567890 ]",
            r#"{"a":1,"a":{"c":3},"0":0}"#,
        ] {
            let v: Value = serde_json::from_str(src).unwrap();
            assert_eq!(stringify_text(src).unwrap(), super::super::stringify(&v));
        }
        for bad in [
            "[1,]",
            "{\"a\" 1}",
            "[1}",
            "{\"a\":1]",
            "[01]",
            "[tru]",
            "[1] x",
            "\"\\x\"",
        ] {
            assert_eq!(stringify_text(bad), Err(Malformed), "{bad}");
        }
    }

    #[test]
    fn deep_containers_become_deep_strings_written_back_as_they_were() {
        let n = 100_000;
        let line = format!(
            "{{\"a\":{}{{\"k\":\"v\",\"0\":1}}{}}}",
            "[".repeat(n),
            "]".repeat(n)
        );
        let cut = shallow(&line).unwrap().unwrap();
        let v: Value = serde_json::from_str(&cut).unwrap();
        let want = format!(
            "{{\"a\":{}{{\"0\":1,\"k\":\"v\"}}{}}}",
            "[".repeat(n),
            "]".repeat(n)
        );
        assert_eq!(super::super::stringify(&v), want);
        assert_eq!(super::super::stringify_len(&v), want.len());
        assert_eq!(shallow("[[1]]").unwrap(), None);
        assert!(
            text("\u{10FFFF}forged:[1]").is_none(),
            "the token is needed"
        );
    }

    /// One level around a value, as written and as `JSON.stringify` writes it back.
    const WRAPPERS: [(&str, &str, &str, &str); 4] = [
        ("[ ", " ]", "[", "]"),
        (r#"{"b":true , "0": "#, "}", r#"{"0":"#, r#","b":true}"#),
        (r#"{"a":null,"a":"#, "}", r#"{"a":"#, "}"),
        ("[1.0,", "]", "[1,", "]"),
    ];
    /// Innermost values, as written and as written back.
    const LEAVES: [(&str, &str); 6] = [
        ("1.0", "1"),
        (r#""\u0041""#, r#""A""#),
        ("-0", "0"),
        ("1e400", "null"),
        (r#""\ud83d""#, r#""\ud83d""#),
        ("2.50", "2.5"),
    ];

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(48))]
        /// At any depth, a line reads back as `JSON.stringify(JSON.parse(line))` and measures
        /// its length: key order, duplicate keys, number forms, escapes and lone surrogates
        /// deep inside as near the top.
        #[test]
        fn any_depth_reads_back_as_javascript_writes_it(
            levels in proptest::collection::vec(0..WRAPPERS.len(), 0..1500),
            leaf in 0..LEAVES.len(),
        ) {
            let (mut raw, mut want) = (String::new(), String::new());
            for &w in &levels {
                raw.push_str(WRAPPERS[w].0);
                want.push_str(WRAPPERS[w].2);
            }
            raw.push_str(LEAVES[leaf].0);
            want.push_str(LEAVES[leaf].1);
            for &w in levels.iter().rev() {
                raw.push_str(WRAPPERS[w].1);
                want.push_str(WRAPPERS[w].3);
            }
            let v = super::super::parse_line(&raw).expect("JSON at any depth");
            proptest::prop_assert_eq!(super::super::stringify(&v), want.clone());
            proptest::prop_assert_eq!(super::super::stringify_len(&v), want.len());
        }
    }
}
