//! JavaScript-compatible JSON helpers (sessions.md §10).
//!
//! Pi measures and re-serializes JSON with JavaScript semantics: lengths are UTF-16 code units,
//! `JSON.stringify` lists array-index keys first and prints numbers in the shortest round-trip
//! form (`1` not `1.0`, `1e+21`). Token estimates and summarizer input depend on those lengths,
//! so every place that "stringifies like Pi" goes through here.
//!
//! Strings are Rust `String`s, which cannot hold lone surrogates. Policy: a session line whose
//! JSON escapes a lone surrogate is parsed with that escape replaced by U+FFFD (see
//! [`parse_line`]); U+FFFD is one UTF-16 unit like the surrogate, so every length Pi computes
//! stays the same.

use serde_json::{Map, Value};

/// Length of `s` in UTF-16 code units (JavaScript's `.length`).
///
/// Counts every byte that starts a scalar value, plus one more for 4-byte sequences (which
/// are surrogate pairs in UTF-16). This runs over hundreds of megabytes at load, so it works
/// on bytes rather than decoding chars.
#[inline]
pub fn utf16_len(s: &str) -> usize {
    let bytes = s.as_bytes();
    if bytes.is_ascii() {
        return bytes.len();
    }
    bytes
        .iter()
        .map(|&b| usize::from((b & 0xC0) != 0x80) + usize::from(b >= 0xF0))
        .sum()
}

/// JavaScript's `str.slice(0, n)` for `n` UTF-16 units, rounded down to a char boundary when
/// `n` would split a surrogate pair (Rust strings cannot hold the half; this is the one place we
/// knowingly differ from JS, by at most one unit).
pub fn utf16_prefix(s: &str, n: usize) -> &str {
    let mut units = 0usize;
    for (idx, ch) in s.char_indices() {
        let w = ch.len_utf16();
        if units + w > n {
            return &s[..idx];
        }
        units += w;
    }
    s
}

/// Compares two strings by UTF-16 code units (JavaScript's default `sort()` order).
pub fn cmp_utf16(a: &str, b: &str) -> std::cmp::Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

/// Whether `key` is a canonical array index ("0", "42", not "01"; below 2^32 - 1): JavaScript
/// objects enumerate those keys first, in numeric order.
fn is_array_index(key: &str) -> Option<u32> {
    if key.is_empty() || key.len() > 10 || (key.len() > 1 && key.starts_with('0')) {
        return None;
    }
    if !key.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = key.parse().ok()?;
    if n < u64::from(u32::MAX) {
        Some(n as u32)
    } else {
        None
    }
}

/// The keys of `map` in JavaScript enumeration order.
pub fn js_key_order(map: &Map<String, Value>) -> Vec<(&String, &Value)> {
    let mut indexed: Vec<(u32, &String, &Value)> = Vec::new();
    let mut named: Vec<(&String, &Value)> = Vec::with_capacity(map.len());
    for (k, v) in map {
        match is_array_index(k) {
            Some(n) => indexed.push((n, k, v)),
            None => named.push((k, v)),
        }
    }
    if indexed.is_empty() {
        return named;
    }
    indexed.sort_by_key(|(n, _, _)| *n);
    indexed
        .into_iter()
        .map(|(_, k, v)| (k, v))
        .chain(named)
        .collect()
}

/// Appends a JavaScript number rendering of `n`.
fn write_number(out: &mut String, n: &serde_json::Number) {
    const MAX_SAFE: u64 = 1 << 53;
    if let Some(u) = n.as_u64() {
        if u <= MAX_SAFE {
            out.push_str(&u.to_string());
            return;
        }
    } else if let Some(i) = n.as_i64() {
        if i.unsigned_abs() <= MAX_SAFE {
            out.push_str(&i.to_string());
            return;
        }
    }
    let f = n.as_f64().unwrap_or(0.0);
    out.push_str(js_number(f).as_str());
}

/// JavaScript's `Number.prototype.toString()` for a finite double (`-0` prints `0`).
pub fn js_number(f: f64) -> String {
    if f == 0.0 {
        return "0".to_string();
    }
    if !f.is_finite() {
        return "null".to_string();
    }
    let mut buf = ryu_js::Buffer::new();
    buf.format_finite(f).to_string()
}

/// Appends `s` as a JSON string literal with JavaScript's escapes (which serde_json shares:
/// `\" \\ \b \f \n \r \t`, other controls as lowercase `\u00xx`, everything else raw).
fn write_string(out: &mut String, s: &str) {
    out.push('"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: Option<&str> = match b {
            b'"' => Some("\\\""),
            b'\\' => Some("\\\\"),
            b'\n' => Some("\\n"),
            b'\r' => Some("\\r"),
            b'\t' => Some("\\t"),
            0x08 => Some("\\b"),
            0x0c => Some("\\f"),
            0..=0x1f => None,
            _ => continue,
        };
        out.push_str(&s[start..i]);
        match esc {
            Some(e) => out.push_str(e),
            None => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.push_str("\\u00");
                out.push(HEX[(b >> 4) as usize] as char);
                out.push(HEX[(b & 0xf) as usize] as char);
            }
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// Appends `JSON.stringify(value)` to `out`.
pub fn write_js(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_js(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, v)) in js_key_order(map).into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, k);
                out.push(':');
                write_js(out, v);
            }
            out.push('}');
        }
    }
}

/// `JSON.stringify(value)`.
pub fn stringify(value: &Value) -> String {
    let mut out = String::new();
    write_js(&mut out, value);
    out
}

/// `JSON.stringify(value).length` (UTF-16 units).
pub fn stringify_len(value: &Value) -> usize {
    match value {
        Value::Null => 4,
        Value::Bool(true) => 4,
        Value::Bool(false) => 5,
        Value::String(s) if !needs_escape(s) => utf16_len(s) + 2,
        _ => utf16_len(&stringify(value)),
    }
}

fn needs_escape(s: &str) -> bool {
    s.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\')
}

/// Parses one session line. On the lone-surrogate error serde_json raises, retries with those
/// escapes replaced by `\ufffd` (module docs); any other error is returned.
pub fn parse_line(line: &str) -> Result<Value, serde_json::Error> {
    match serde_json::from_str::<Value>(line) {
        Ok(v) => Ok(v),
        Err(e) => {
            if line.contains("\\u") || line.contains("\\U") {
                let fixed = replace_lone_surrogates(line);
                if fixed != line {
                    return serde_json::from_str::<Value>(&fixed);
                }
            }
            Err(e)
        }
    }
}

/// Rewrites `\uD800`-`\uDFFF` escapes that do not form a valid high+low pair to `\ufffd`.
fn replace_lone_surrogates(line: &str) -> String {
    fn hex4(b: &[u8]) -> Option<u16> {
        if b.len() < 4 {
            return None;
        }
        let s = std::str::from_utf8(&b[..4]).ok()?;
        u16::from_str_radix(s, 16).ok()
    }
    let bytes = line.as_bytes();
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    let mut copied = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 1 < bytes.len() {
            if bytes[i + 1] == b'u' {
                if let Some(cu) = hex4(&bytes[i + 2..]) {
                    if (0xD800..0xDC00).contains(&cu) {
                        let pair_ok = bytes.get(i + 6) == Some(&b'\\')
                            && bytes.get(i + 7) == Some(&b'u')
                            && hex4(&bytes[(i + 8).min(bytes.len())..])
                                .is_some_and(|lo| (0xDC00..0xE000).contains(&lo));
                        if pair_ok {
                            i += 12;
                            continue;
                        }
                        out.push_str(&line[copied..i]);
                        out.push_str("\\ufffd");
                        i += 6;
                        copied = i;
                        continue;
                    }
                    if (0xDC00..0xE000).contains(&cu) {
                        out.push_str(&line[copied..i]);
                        out.push_str("\\ufffd");
                        i += 6;
                        copied = i;
                        continue;
                    }
                }
            }
            i += 2;
            continue;
        }
        i += 1;
    }
    out.push_str(&line[copied..]);
    out
}

/// JavaScript truthiness of a JSON value (`""`, `0`, `null`, `false` are falsy).
pub fn truthy(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_f64().is_some_and(|f| f != 0.0 && !f.is_nan()),
        Some(Value::String(s)) => !s.is_empty(),
        Some(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn utf16_lengths_match_javascript() {
        assert_eq!(utf16_len("abcde"), 5);
        assert_eq!(utf16_len("😀"), 2);
        assert_eq!(utf16_len("файл"), 4);
        assert_eq!(utf16_len("ü€😀a"), 5);
    }

    #[test]
    fn stringify_reorders_index_keys_first() {
        let v: Value = serde_json::from_str(r#"{"b":1,"2":2,"a":3,"01":4,"1":5}"#).unwrap();
        assert_eq!(stringify(&v), r#"{"1":5,"2":2,"b":1,"a":3,"01":4}"#);
    }

    #[test]
    fn numbers_print_like_javascript() {
        let v: Value =
            serde_json::from_str(r#"[1.0,-0.0,1e21,1e-7,0.5,12345678901234567890,3]"#).unwrap();
        assert_eq!(stringify(&v), "[1,0,1e+21,1e-7,0.5,12345678901234567000,3]");
    }

    #[test]
    fn string_escapes_match_javascript() {
        let v = json!("a\"b\\c\n\t\u{1}\u{7f}/\u{2028}");
        assert_eq!(stringify(&v), "\"a\\\"b\\\\c\\n\\t\\u0001\u{7f}/\u{2028}\"");
        assert_eq!(stringify_len(&v), utf16_len(&stringify(&v)));
    }

    #[test]
    fn lone_surrogates_become_replacement_chars() {
        let v = parse_line(r#"{"t":"a\ud800b\udc00c\ud83d\ude00"}"#).unwrap();
        assert_eq!(v["t"], json!("a\u{fffd}b\u{fffd}c😀"));
        assert!(parse_line("{not json").is_err());
    }

    #[test]
    fn utf16_sort_differs_from_byte_order_above_bmp() {
        // U+FF5E (fullwidth tilde) sorts after U+1F600 in UTF-16 (surrogates are 0xD8xx).
        assert_eq!(cmp_utf16("\u{ff5e}", "😀"), std::cmp::Ordering::Greater);
        assert_eq!(cmp_utf16("Z", "a"), std::cmp::Ordering::Less);
        assert_eq!(utf16_prefix("a😀b", 2), "a");
        assert_eq!(utf16_prefix("a😀b", 3), "a😀");
    }
}
