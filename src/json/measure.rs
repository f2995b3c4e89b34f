//! `JSON.stringify(value).length` and decoded string lengths, measured straight from the
//! serialized bytes without building a value (the one-pass fact reader, `session::facts`, reads
//! every session line this way). Lengths are UTF-16 code units, as JavaScript counts them.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use super::{js_number, utf16_len};

/// The UTF-16 length of the string a raw JSON string literal decodes to (`None` when `raw` is
/// not a string literal). serde_json has validated the literal, escapes included.
pub(crate) fn raw_string_utf16_len(raw: &str) -> Option<u64> {
    let inner = raw.strip_prefix('"')?.strip_suffix('"')?.as_bytes();
    // Every byte of the literal counted as UTF-16 units (one per scalar's leading byte, two for
    // 4-byte sequences), then corrected for escapes: `\X` is one unit written as two bytes,
    // `\uXXXX` one unit written as six (a surrogate pair is two escapes, so two units).
    let mut units: u64 = if inner.is_ascii() {
        inner.len() as u64
    } else {
        inner
            .iter()
            .map(|&b| u64::from((b & 0xC0) != 0x80) + u64::from(b >= 0xF0))
            .sum()
    };
    let mut next = 0usize;
    for i in memchr::memchr_iter(b'\\', inner) {
        if i < next {
            continue; // the escaped character of the previous escape
        }
        if inner.get(i + 1) == Some(&b'u') {
            units = units.saturating_sub(5);
            next = i + 6;
        } else {
            units = units.saturating_sub(1);
            next = i + 2;
        }
    }
    Some(units)
}

/// Result of measuring one value.
pub(crate) struct Measured {
    pub(crate) len: u64,
    /// The top-level `path` string of an object (only when asked for).
    pub(crate) path: Option<String>,
}

/// Measures the `JSON.stringify` length of any value. Duplicate keys keep the last value, as
/// `JSON.parse` does; key order does not change the length.
#[derive(Clone, Copy)]
pub(crate) struct StringifyLen {
    capture_path: bool,
}

impl StringifyLen {
    /// Measures only.
    pub(crate) const fn plain() -> StringifyLen {
        StringifyLen {
            capture_path: false,
        }
    }

    /// Also captures an object's top-level `path` string (a tool call's file argument).
    pub(crate) const fn capturing_path() -> StringifyLen {
        StringifyLen { capture_path: true }
    }
}

/// Length of `s` as a JSON string literal written by `JSON.stringify`, in UTF-16 units.
fn escaped_len(s: &str) -> u64 {
    let mut extra = 0u64;
    for &b in s.as_bytes() {
        match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => extra += 1,
            0..=0x1f => extra += 5,
            _ => {}
        }
    }
    utf16_len(s) as u64 + extra + 2
}

fn number_len(n: serde_json::Number) -> u64 {
    let mut s = String::new();
    crate::json::write_js(&mut s, &serde_json::Value::Number(n));
    s.len() as u64
}

impl<'de> DeserializeSeed<'de> for StringifyLen {
    type Value = Measured;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Measured, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StringifyLen {
    type Value = Measured;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: de::Error>(self, b: bool) -> Result<Measured, E> {
        Ok(Measured {
            len: if b { 4 } else { 5 },
            path: None,
        })
    }
    fn visit_unit<E: de::Error>(self) -> Result<Measured, E> {
        Ok(Measured { len: 4, path: None })
    }
    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Measured, E> {
        Ok(Measured {
            len: number_len(n.into()),
            path: None,
        })
    }
    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Measured, E> {
        Ok(Measured {
            len: number_len(n.into()),
            path: None,
        })
    }
    fn visit_f64<E: de::Error>(self, n: f64) -> Result<Measured, E> {
        Ok(Measured {
            len: js_number(n).len() as u64,
            path: None,
        })
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<Measured, E> {
        Ok(Measured {
            len: escaped_len(s),
            path: None,
        })
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Measured, A::Error> {
        let mut len = 2u64;
        let mut n = 0u64;
        let inner = StringifyLen::plain();
        while let Some(m) = a.next_element_seed(inner)? {
            len += m.len;
            n += 1;
        }
        Ok(Measured {
            len: len + n.saturating_sub(1),
            path: None,
        })
    }
    fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Measured, A::Error> {
        // (key, member length) with the last value of a duplicated key.
        let mut members: Vec<(String, u64)> = Vec::new();
        let mut path: Option<String> = None;
        let inner = StringifyLen::plain();
        while let Some(key) = a.next_key::<FullKey>()? {
            let key = key.0;
            let member_len;
            if self.capture_path && key == "path" {
                let v = a.next_value::<PathValue>()?;
                path = v.text;
                member_len = v.len;
            } else {
                member_len = a.next_value_seed(inner)?.len;
            }
            let total = escaped_len(&key) + 1 + member_len;
            match members.iter_mut().find(|(k, _)| *k == key) {
                Some(slot) => slot.1 = total,
                None => members.push((key, total)),
            }
        }
        let n = members.len() as u64;
        let sum: u64 = members.iter().map(|(_, l)| l).sum();
        Ok(Measured {
            len: 2 + sum + n.saturating_sub(1),
            path,
        })
    }
}

/// An object key with its full text (duplicate detection needs it).
struct FullKey(String);

impl<'de> Deserialize<'de> for FullKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = FullKey;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<FullKey, E> {
                Ok(FullKey(s.to_owned()))
            }
        }
        d.deserialize_str(V)
    }
}

/// The value of `arguments.path`: its stringify length, and its text when it is a string.
struct PathValue {
    len: u64,
    text: Option<String>,
}

impl<'de> Deserialize<'de> for PathValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = PathValue;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<PathValue, E> {
                Ok(PathValue {
                    len: escaped_len(s),
                    text: Some(s.to_owned()),
                })
            }
            fn visit_bool<E: de::Error>(self, b: bool) -> Result<PathValue, E> {
                Ok(plain(StringifyLen::visit_bool(NO_PATH, b)?))
            }
            fn visit_unit<E: de::Error>(self) -> Result<PathValue, E> {
                Ok(plain(StringifyLen::visit_unit(NO_PATH)?))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<PathValue, E> {
                Ok(plain(StringifyLen::visit_u64(NO_PATH, n)?))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<PathValue, E> {
                Ok(plain(StringifyLen::visit_i64(NO_PATH, n)?))
            }
            fn visit_f64<E: de::Error>(self, n: f64) -> Result<PathValue, E> {
                Ok(plain(StringifyLen::visit_f64(NO_PATH, n)?))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, a: A) -> Result<PathValue, A::Error> {
                Ok(plain(StringifyLen::visit_seq(NO_PATH, a)?))
            }
            fn visit_map<A: MapAccess<'de>>(self, a: A) -> Result<PathValue, A::Error> {
                Ok(plain(StringifyLen::visit_map(NO_PATH, a)?))
            }
        }
        d.deserialize_any(V)
    }
}

const NO_PATH: StringifyLen = StringifyLen::plain();

fn plain(m: Measured) -> PathValue {
    PathValue {
        len: m.len,
        text: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::stringify_len;
    use serde_json::{json, Value};

    fn measure(v: &Value) -> u64 {
        let text = serde_json::to_string(v).unwrap();
        let mut de = serde_json::Deserializer::from_str(&text);
        StringifyLen::plain().deserialize(&mut de).unwrap().len
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
            assert_eq!(measure(&v), stringify_len(&v) as u64, "{v}");
        }
    }

    #[test]
    fn raw_string_lengths_count_decoded_units() {
        for (raw, want) in [
            (r#""abc""#, 3),
            (r#""a\nb""#, 3),
            (r#""\u00e9\ud83d\ude00x""#, 4),
            (r#""é😀""#, 3),
            (r#""\\\"""#, 2),
            (r#""""#, 0),
        ] {
            assert_eq!(raw_string_utf16_len(raw), Some(want), "{raw}");
        }
        assert_eq!(raw_string_utf16_len("12"), None);
    }
}
