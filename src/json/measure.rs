//! `JSON.stringify(value).length` and decoded string lengths, measured straight from the
//! serialized text without building a value (the one-pass fact reader, `session::facts`, reads
//! every session line this way). Lengths are UTF-16 code units, as JavaScript counts them.

use super::scan::{Cursor, Declined, Literal, Scan};

/// A number's text as serde_json reads it (`-0` is `-0.0`, integers beyond 64 bits are
/// floats); `Declined` beyond `f64`'s range, which the general path carries.
pub(crate) fn number_value(text: &str) -> Scan<serde_json::Number> {
    // The common case, a short integer, without a parser.
    if is_short_integer(text) {
        if let Some(digits) = text.strip_prefix('-') {
            let n: i64 = digits.parse().map_err(|_| Declined)?;
            return Ok(if n == 0 {
                serde_json::Number::from_f64(-0.0).ok_or(Declined)?
            } else {
                serde_json::Number::from(-n)
            });
        }
        let n: u64 = text.parse().map_err(|_| Declined)?;
        return Ok(serde_json::Number::from(n));
    }
    serde_json::from_str(text).map_err(|_| Declined)
}

/// An integer of at most 15 characters: exact in `f64`, and written by JavaScript as it is
/// (but for `-0`).
fn is_short_integer(text: &str) -> bool {
    text.len() <= 15 && !text.contains(['.', 'e', 'E'])
}

/// `Value::as_f64` of a number's text.
pub(crate) fn number_f64(text: &str) -> Scan<f64> {
    number_value(text)?.as_f64().ok_or(Declined)
}

fn number_stringify_len(text: &str) -> Scan<u64> {
    // Short integers other than `-0` are written back as they are.
    if is_short_integer(text) && text != "-0" {
        return Ok(text.len() as u64);
    }
    let mut s = String::new();
    super::write_number(&mut s, &number_value(text)?);
    Ok(s.len() as u64)
}

/// The `JSON.stringify` length of the value at the cursor, and (with `capture_path`) its
/// top-level `path` string when it is an object (a tool call's file argument). Duplicate keys
/// keep the last value, as `JSON.parse` does; key order does not change the length.
pub(crate) fn stringify_len(c: &mut Cursor, capture_path: bool) -> Scan<(u64, Option<String>)> {
    let len = match c.peek() {
        Some(b'"') => c.string()?.stringify_len(),
        Some(b'{') => return object_len(c, capture_path),
        Some(b'[') => {
            let (mut len, mut n) = (2u64, 0u64);
            c.array(|c| {
                len += stringify_len(c, false)?.0;
                n += 1;
                Ok(())
            })?;
            len + n.saturating_sub(1)
        }
        Some(b'-' | b'0'..=b'9') => number_stringify_len(c.number()?)?,
        Some(b'n' | b't') => {
            c.skip()?;
            4
        }
        Some(b'f') => {
            c.skip()?;
            5
        }
        _ => return Err(Declined),
    };
    Ok((len, None))
}

fn same_key(a: &Literal, b: &Literal) -> bool {
    if !a.escaped && !b.escaped {
        a.inner() == b.inner()
    } else {
        a.decoded() == b.decoded()
    }
}

fn object_len(c: &mut Cursor, capture_path: bool) -> Scan<(u64, Option<String>)> {
    // (key, member length) with the last value of a duplicated key.
    let mut members: Vec<(Literal, u64)> = Vec::new();
    let mut path: Option<String> = None;
    c.object(|c, key| {
        let value_len = if capture_path && key.is("path") {
            let (len, text) = path_value(c)?;
            path = text;
            len
        } else {
            stringify_len(c, false)?.0
        };
        let total = key.stringify_len() + 1 + value_len;
        match members.iter_mut().find(|(k, _)| same_key(k, &key)) {
            Some(slot) => slot.1 = total,
            None => members.push((key, total)),
        }
        Ok(())
    })?;
    let n = members.len() as u64;
    let sum: u64 = members.iter().map(|(_, l)| l).sum();
    Ok((2 + sum + n.saturating_sub(1), path))
}

/// The value of `path`: its stringify length, and its decoded text when it is a string.
fn path_value(c: &mut Cursor) -> Scan<(u64, Option<String>)> {
    if c.peek() == Some(b'"') {
        let lit = c.string()?;
        return Ok((lit.stringify_len(), Some(lit.decoded().into_owned())));
    }
    Ok((stringify_len(c, false)?.0, None))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::stringify_len as value_stringify_len;
    use serde_json::{json, Value};

    fn measure(text: &str) -> u64 {
        let mut c = Cursor::new(text.as_bytes());
        let (len, _) = stringify_len(&mut c, false).unwrap();
        assert!(c.at_end(), "{text}");
        len
    }

    #[test]
    fn stringify_lengths_match_the_value_path() {
        for v in [
            json!(null),
            json!(true),
            json!(false),
            json!(12345678901234567890u64),
            json!(-0.0),
            json!(1e21),
            json!(0.1),
            json!("a\"b\\c\n\u{1}é😀"),
            json!([]),
            json!([1, "x", {"a": [null]}]),
            json!({}),
            json!({"path": "src/a.rs", "2": 1, "b": {"c": "d"}}),
        ] {
            let text = serde_json::to_string(&v).unwrap();
            assert_eq!(measure(&text), value_stringify_len(&v) as u64, "{v}");
        }
        // Spellings serde_json never writes: escapes JSON.stringify writes differently,
        // number forms it rewrites, whitespace, duplicate keys.
        for text in [
            r#""\/\u0041\u0022\u005c\u000a\u0001\u007f\u2028\ud83d\ude00""#,
            "[ 1.0 , -0 , 1E2 , 12345678901234567890123 , 2.50 ]",
            r#"{ "a" : "1" , "a" : "22" , "\u0061" : 3 }"#,
        ] {
            let v: Value = serde_json::from_str(text).unwrap();
            assert_eq!(measure(text), value_stringify_len(&v) as u64, "{text}");
        }
    }

    #[test]
    fn decoded_lengths_count_utf16_units() {
        for (raw, want) in [
            (r#""abc""#, 3),
            (r#""a\nb""#, 3),
            (r#""\u00e9\ud83d\ude00x""#, 4),
            (r#""é😀""#, 3),
            (r#""\\\"""#, 2),
            (r#""""#, 0),
        ] {
            let lit = Cursor::new(raw.as_bytes()).string().unwrap();
            assert_eq!(lit.utf16_len(), want, "{raw}");
            let decoded: String = serde_json::from_str(raw).unwrap();
            assert_eq!(
                lit.utf16_len() as usize,
                crate::json::utf16_len(&decoded),
                "{raw}"
            );
        }
    }

    #[test]
    fn numbers_read_as_serde_json_reads_them() {
        for text in [
            "0",
            "-0",
            "7",
            "-7",
            "123456789012345",
            "12345678901234567890",
            "-9223372036854775809",
            "1.5",
            "2.50",
            "1e3",
            "-0.0",
            "1E-7",
        ] {
            let want: serde_json::Number = serde_json::from_str(text).unwrap();
            assert_eq!(number_value(text), Ok(want.clone()), "{text}");
            assert_eq!(
                number_f64(text).map(f64::to_bits),
                Ok(want.as_f64().unwrap().to_bits()),
                "{text}"
            );
        }
    }

    #[test]
    fn the_path_is_captured_from_the_top_level_object_only() {
        let mut c = Cursor::new(br#"{"path":"a\/b","x":{"path":"c"}}"#);
        let (_, path) = stringify_len(&mut c, true).unwrap();
        assert_eq!(path.as_deref(), Some("a/b"));
        let mut c = Cursor::new(br#"{"path":"a","path":7}"#);
        assert_eq!(stringify_len(&mut c, true).unwrap().1, None);
        assert_eq!(number_f64("-0").map(f64::to_bits), Ok((-0.0f64).to_bits()));
        assert_eq!(number_f64("1e400"), Err(Declined));
    }
}
