//! JavaScript-compatible JSON helpers (sessions.md §10).
//!
//! Pi measures and re-serializes JSON with JavaScript semantics: lengths are UTF-16 code units,
//! `JSON.stringify` lists array-index keys first and prints numbers in the shortest round-trip
//! form (`1` not `1.0`, `1e+21`). Token estimates and summarizer input depend on those lengths,
//! so every place that "stringifies like Pi" goes through here.
//!
//! Values JavaScript holds that serde_json cannot, carried losslessly (see [`parse_line`]):
//! - A lone UTF-16 surrogate (`"\ud83d"`, what `JSON.stringify` writes for a string cut inside
//!   an emoji) cannot be in a Rust `String`. It is carried as a *surrogate carrier*, the
//!   supplementary private-use code point `U+10D800 + (unit - 0xD800)` (U+10D800..=U+10DFFF),
//!   which counts as one UTF-16 unit here ([`utf16_len`], [`utf16_prefix`]) and is written back
//!   as the same `\udxxx` escape ([`stringify`]). So ids stay byte-exact (a compaction's
//!   `parentId` is the id Pi sees) and text keeps Pi's lengths.
//! - A number beyond `f64` (`1e400`, Infinity to `JSON.parse`) is carried as `±f64::MAX`, which
//!   compares as Infinity does (a header version of `1e400` is not migrated) and is written as
//!   `null`, as `JSON.stringify(Infinity)` is.
//! - A container nested deeper than [`deep::HELD_DEPTH`] (Pi reads any depth; a `Value` recurses
//!   per level) is carried as a *deep string* holding its `JSON.stringify` text, which
//!   [`write_js`] writes and [`stringify_len`] measures in its place (see [`deep`]).

pub mod deep;
pub mod measure;
pub mod scan;

use std::fmt::Write as _;

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
    let units: usize = bytes
        .iter()
        .map(|&b| usize::from((b & 0xC0) != 0x80) + usize::from(b >= 0xF0))
        .sum();
    // A surrogate carrier (F4 8D A0..BF ..) is one unit, not a pair.
    units
        - memchr::memmem::find_iter(bytes, b"\xF4\x8D")
            .filter(|&i| bytes.get(i + 2).is_some_and(|b| (0xA0..=0xBF).contains(b)))
            .count()
}

/// First code point of the surrogate carriers (module docs): `U+10D800 + (unit - 0xD800)`.
const CARRIER_BASE: u32 = 0x10D800;

/// The lone surrogate a char carries, if it is a surrogate carrier.
pub fn carried_surrogate(c: char) -> Option<u16> {
    let c = c as u32;
    (CARRIER_BASE..CARRIER_BASE + 0x800)
        .contains(&c)
        .then(|| (c - CARRIER_BASE + 0xD800) as u16)
}

/// The carrier of a lone surrogate code unit (module docs).
fn carrier(unit: u16) -> char {
    char::from_u32(CARRIER_BASE + u32::from(unit - 0xD800)).unwrap_or('\u{fffd}')
}

/// A char's width in UTF-16 units (a surrogate carrier is one).
fn js_width(c: char) -> usize {
    if carried_surrogate(c).is_some() {
        1
    } else {
        c.len_utf16()
    }
}

/// JavaScript's `str.slice(0, n)` for `n` UTF-16 units, rounded down to a char boundary when
/// `n` would split a surrogate pair (Rust strings cannot hold the half; this is the one place we
/// knowingly differ from JS, by at most one unit).
pub fn utf16_prefix(s: &str, n: usize) -> &str {
    let mut units = 0usize;
    for (idx, ch) in s.char_indices() {
        let w = js_width(ch);
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
pub fn write_number(out: &mut String, n: &serde_json::Number) {
    const MAX_SAFE: u64 = 1 << 53;
    if let Some(u) = n.as_u64() {
        if u <= MAX_SAFE {
            let _ = write!(out, "{u}");
            return;
        }
    } else if let Some(i) = n.as_i64() {
        if i.unsigned_abs() <= MAX_SAFE {
            let _ = write!(out, "{i}");
            return;
        }
    }
    let f = n.as_f64().unwrap_or(0.0);
    out.push_str(js_number(f).as_str());
}

/// JavaScript's `Number.prototype.toString()` for a finite double (`-0` prints `0`); `±f64::MAX`,
/// the carrier of ±Infinity (module docs), and non-finite values print `null`, as
/// `JSON.stringify` prints Infinity.
pub fn js_number(f: f64) -> String {
    if f == 0.0 {
        return "0".to_string();
    }
    if !f.is_finite() || f.abs() == f64::MAX {
        return "null".to_string();
    }
    let mut buf = ryu_js::Buffer::new();
    buf.format_finite(f).to_string()
}

/// Appends `s` as a JSON string literal with JavaScript's escapes (which serde_json shares:
/// `\" \\ \b \f \n \r \t`, other controls as lowercase `\u00xx`, everything else raw).
pub fn write_string(out: &mut String, s: &str) {
    out.push('"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if b == 0xF4 && bytes.get(i + 1) == Some(&0x8D) {
            // A surrogate carrier: written as the lone surrogate's escape, as Pi writes it.
            if let Some(unit) = s[i..].chars().next().and_then(carried_surrogate) {
                out.push_str(&s[start..i]);
                out.push_str(&format!("\\u{unit:04x}"));
                start = i + 4;
            }
            continue;
        }
        if i < start {
            continue;
        }
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
        Value::String(s) => match deep::text(s) {
            Some(json) => out.push_str(json),
            None => write_string(out, s),
        },
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
            let member = |out: &mut String, i: usize, k: &str, v: &Value| {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, k);
                out.push(':');
                write_js(out, v);
            };
            out.push('{');
            // Integer-like keys are rare: only then is the order computed (into a vector).
            if map.keys().any(|k| is_array_index(k).is_some()) {
                for (i, (k, v)) in js_key_order(map).into_iter().enumerate() {
                    member(out, i, k, v);
                }
            } else {
                for (i, (k, v)) in map.iter().enumerate() {
                    member(out, i, k, v);
                }
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
        Value::String(s) if deep::text(s).is_some() => deep::text(s).map_or(0, utf16_len),
        _ => utf16_len(&stringify(value)),
    }
}

fn needs_escape(s: &str) -> bool {
    s.bytes()
        .any(|b| b < 0x20 || b == b'"' || b == b'\\' || b == 0xF4)
}

/// Parses one session line as `JSON.parse` reads it. serde_json's own parse is tried first; a
/// line it refuses is retried once with what it cannot hold carried (module docs: lone
/// surrogates, numbers beyond `f64`, and containers nested deeper than [`deep::HELD_DEPTH`],
/// kept as deep strings, so nothing built from the line recurses past that depth). Any other
/// error is returned.
pub fn parse_line(line: &str) -> Result<Value, serde_json::Error> {
    let e = match serde_json::from_str::<Value>(line) {
        Ok(v) => return Ok(v),
        Err(e) => e,
    };
    let fixed = carry_unrepresentable(line);
    let text = fixed.as_deref().unwrap_or(line);
    let held = match deep::shallow(text) {
        Ok(held) => held,
        Err(deep::Malformed) => return Err(e),
    };
    serde_json::from_str(held.as_deref().unwrap_or(text)).map_err(|_| e)
}

/// The line with its lone surrogate escapes replaced by their carriers and its numbers beyond
/// `f64` by `±f64::MAX` (module docs), or `None` when it has neither.
fn carry_unrepresentable(line: &str) -> Option<String> {
    fn hex4(b: &[u8]) -> Option<u16> {
        let s = std::str::from_utf8(b.get(..4)?).ok()?;
        u16::from_str_radix(s, 16).ok()
    }
    let bytes = line.as_bytes();
    let mut out = String::with_capacity(line.len());
    let (mut i, mut copied, mut in_str, mut changed) = (0usize, 0usize, false, false);
    while i < bytes.len() {
        let b = bytes[i];
        if in_str {
            match b {
                b'"' => in_str = false,
                b'\\' if bytes.get(i + 1) == Some(&b'u') => {
                    if let Some(cu) = hex4(&bytes[i + 2..]) {
                        let paired = (0xD800..0xDC00).contains(&cu)
                            && bytes.get(i + 6) == Some(&b'\\')
                            && bytes.get(i + 7) == Some(&b'u')
                            && bytes
                                .get(i + 8..)
                                .and_then(hex4)
                                .is_some_and(|lo| (0xDC00..0xE000).contains(&lo));
                        if paired {
                            i += 12;
                            continue;
                        }
                        if (0xD800..0xE000).contains(&cu) {
                            out.push_str(&line[copied..i]);
                            out.push(carrier(cu));
                            i += 6;
                            copied = i;
                            changed = true;
                            continue;
                        }
                    }
                    i += 2;
                    continue;
                }
                b'\\' => {
                    i += 2;
                    continue;
                }
                _ => {}
            }
            i += 1;
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'-' | b'0'..=b'9' => {
                let end = bytes[i..]
                    .iter()
                    .position(|c| !matches!(c, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'))
                    .map_or(bytes.len(), |n| i + n);
                let token = &line[i..end];
                if token.parse::<f64>().is_ok_and(f64::is_infinite) {
                    out.push_str(&line[copied..i]);
                    out.push_str(if token.starts_with('-') {
                        "-1.7976931348623157e308"
                    } else {
                        "1.7976931348623157e308"
                    });
                    copied = end;
                    changed = true;
                }
                i = end;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    if !changed {
        return None;
    }
    out.push_str(&line[copied..]);
    Some(out)
}

/// The strings of a JSON array (other members skipped; not an array: none).
pub fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
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
    fn lone_surrogates_are_carried_and_written_back_byte_exact() {
        let line = r#"{"t":"a\ud800b\udc00c\ud83d\ude00","id":"x\ud83d"}"#;
        let v = parse_line(line).unwrap();
        let t = v["t"].as_str().unwrap();
        assert_eq!(
            utf16_len(t),
            7,
            "one unit per lone surrogate, two for the pair"
        );
        assert_eq!(stringify(&v), r#"{"t":"a\ud800b\udc00c😀","id":"x\ud83d"}"#);
        assert_eq!(stringify_len(&v["id"]), r#""x\ud83d""#.len());
        assert_eq!(utf16_prefix(t, 2), &t[..5], "a and the carrier");
        assert!(parse_line("{not json").is_err());
    }

    #[test]
    fn numbers_beyond_f64_read_as_infinity_and_print_null() {
        let v = parse_line(r#"{"version":1e400,"t":-1e999,"ok":1.5,"s":"1e400"}"#).unwrap();
        assert_eq!(v["version"].as_f64(), Some(f64::MAX));
        assert!(v["version"].as_f64().unwrap() >= 3.0);
        assert_eq!(v["t"].as_f64(), Some(-f64::MAX));
        assert_eq!(
            stringify(&v),
            r#"{"version":null,"t":null,"ok":1.5,"s":"1e400"}"#
        );
    }

    #[test]
    fn nesting_past_serdes_limit_is_read_at_any_depth() {
        let deep = |n: usize| format!("{{\"a\":{}1{}}}", "[".repeat(n), "]".repeat(n));
        assert!(serde_json::from_str::<Value>(&deep(200)).is_err());
        for n in [200, 600, 100_000] {
            let v = parse_line(&deep(n)).unwrap();
            assert_eq!(stringify(&v), deep(n));
            assert_eq!(stringify_len(&v), deep(n).len());
        }
        assert!(parse_line(&format!("{}]", deep(100_000))).is_err());
        let torn = format!("{{\"a\":{}1{}", "[".repeat(1000), "]".repeat(999));
        assert!(parse_line(&torn).is_err(), "malformed deep part");
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
