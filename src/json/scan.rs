//! A validating cursor over one line of JSON text, for readers that keep almost nothing.
//!
//! Opening a session reads every line's facts (`session::facts`) and skips the rest of the
//! line, so the cost of an open is the cost of this walk. A general parser (serde_json's
//! `IgnoredAny` is the benchmarks' floor) goes through its visitor machinery for every key and
//! value; this cursor only moves over bytes, finds the end of a string sixteen bytes at a time,
//! and hands the caller each string as its raw literal, so long texts are measured straight
//! from their bytes and never unescaped.
//!
//! It accepts a subset of what `JSON.parse` accepts, and declines the rest: a [`Declined`]
//! line is read by the general `Value` path instead, which decides whether it is malformed and
//! reads what the cursor does not handle (lone surrogates, very deep nesting, invalid UTF-8).
//! So the cursor must never accept text that is not JSON, and may decline anything unusual.

use std::borrow::Cow;

/// The cursor does not read this text (not JSON, or JSON it leaves to the general parser).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Declined;

/// Result of a cursor step.
pub(crate) type Scan<T> = Result<T, Declined>;

/// Nesting deeper than this is declined (the general parser has its own, larger limits).
const MAX_DEPTH: u32 = 100;

/// A string literal as written: the bytes between its quotes (valid UTF-8, escapes valid, as
/// the cursor checked), with what the scan learned about them on the way, so lengths need no
/// second pass over an ASCII text.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Literal<'a> {
    /// The literal with its quotes (UTF-8: the scan checked it).
    quoted: &'a str,
    pub(crate) escaped: bool,
    /// Where the first non-ASCII byte stands between the quotes, if any: the bytes before it
    /// are ASCII, so only the rest needs a UTF-8 check and a count of UTF-16 units.
    first_non_ascii: Option<usize>,
    /// Units the escapes are shorter decoded than written (`\n` is one unit in two bytes).
    decoded_fewer: u64,
    /// Units the escapes are shorter as `JSON.stringify` writes them than as written here.
    stringified_fewer: u64,
}

impl<'a> Literal<'a> {
    /// The bytes between the quotes, escapes as written.
    pub(crate) fn inner(&self) -> &'a [u8] {
        self.text().as_bytes()
    }

    /// The text between the quotes (one byte each), escapes as written.
    fn text(&self) -> &'a str {
        &self.quoted[1..self.quoted.len() - 1]
    }

    /// The decoded text (borrowed when there is no escape). Escapes are decoded by serde_json,
    /// which reads every literal the scan accepts (valid UTF-8, valid escapes, paired
    /// surrogates); the empty fallback is never taken.
    pub(crate) fn decoded(&self) -> Cow<'a, str> {
        if !self.escaped {
            return Cow::Borrowed(self.text());
        }
        Cow::Owned(serde_json::from_str(self.quoted).unwrap_or_default())
    }

    /// Whether the decoded text is `key` (an escaped literal is decoded to compare).
    pub(crate) fn is(&self, key: &str) -> bool {
        if self.escaped {
            self.decoded() == key
        } else {
            self.inner() == key.as_bytes()
        }
    }

    /// UTF-16 units of the bytes as written.
    fn written_units(&self) -> u64 {
        match self.first_non_ascii {
            Some(at) => at as u64 + written_units(&self.inner()[at..]),
            None => self.inner().len() as u64,
        }
    }

    /// `.length` of the decoded text in UTF-16 code units.
    pub(crate) fn utf16_len(&self) -> u64 {
        self.written_units() - self.decoded_fewer
    }

    /// `JSON.stringify(decoded).length`: the literal as `JSON.stringify` would write it.
    pub(crate) fn stringify_len(&self) -> u64 {
        self.written_units() + 2 - self.stringified_fewer
    }
}

/// The four hex digits at `b[at..at + 4]` as a number.
pub(crate) fn hex4(b: &[u8], at: usize) -> Option<u32> {
    let digits = b.get(at..at + 4)?;
    digits.iter().try_fold(0u32, |n, &d| {
        let v = (d as char).to_digit(16)?;
        Some(n * 16 + v)
    })
}

/// How many leading bytes of `s` may stand in a string as they are (not `"`, not `\\`, not a
/// control character), and where the first non-ASCII byte among them stands, if any.
fn plain_run(s: &[u8]) -> (usize, Option<usize>) {
    #[cfg(target_arch = "x86_64")]
    {
        plain_run_sse2(s)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        plain_run_swar(s, 0, None)
    }
}

/// [`plain_run`] sixteen bytes at a time (SSE2 is part of every x86-64 CPU), the tail by
/// [`plain_run_swar`].
#[cfg(target_arch = "x86_64")]
fn plain_run_sse2(s: &[u8]) -> (usize, Option<usize>) {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_max_epu8, _mm_movemask_epi8, _mm_or_si128,
        _mm_set1_epi8,
    };
    let mut i = 0;
    let mut first_high = None;
    while let Some(chunk) = s.get(i..).and_then(<[u8]>::first_chunk::<16>) {
        // SAFETY: SSE2 is always present on x86-64; the load reads exactly the 16 bytes of
        // `chunk` (unaligned loads allowed).
        let (hits, top) = unsafe {
            let x = _mm_loadu_si128(chunk.as_ptr().cast::<__m128i>());
            let quote = _mm_cmpeq_epi8(x, _mm_set1_epi8(b'"' as i8));
            let backslash = _mm_cmpeq_epi8(x, _mm_set1_epi8(b'\\' as i8));
            let limit = _mm_set1_epi8(0x1f);
            let control = _mm_cmpeq_epi8(_mm_max_epu8(x, limit), limit);
            let any = _mm_or_si128(_mm_or_si128(quote, backslash), control);
            (_mm_movemask_epi8(any) as u32, _mm_movemask_epi8(x) as u32)
        };
        if top != 0 && first_high.is_none() {
            // Only the bytes before the run's end count (those after it are not the string's).
            let before = if hits != 0 {
                (1 << hits.trailing_zeros()) - 1
            } else {
                u32::MAX
            };
            if top & before != 0 {
                first_high = Some(i + (top & before).trailing_zeros() as usize);
            }
        }
        if hits != 0 {
            return (i + hits.trailing_zeros() as usize, first_high);
        }
        i += 16;
    }
    plain_run_swar(s, i, first_high)
}

/// [`plain_run`] from `i`, eight bytes at a time (each test flags exactly its lowest matching
/// byte, so the lowest flag of the three is the first byte that ends the run).
fn plain_run_swar(s: &[u8], mut i: usize, mut first_high: Option<usize>) -> (usize, Option<usize>) {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    while let Some(chunk) = s.get(i..).and_then(<[u8]>::first_chunk::<8>) {
        let x = u64::from_le_bytes(*chunk);
        let quote = x ^ (ONES * u64::from(b'"'));
        let backslash = x ^ (ONES * u64::from(b'\\'));
        let hit = (quote.wrapping_sub(ONES) & !quote)
            | (backslash.wrapping_sub(ONES) & !backslash)
            | (x.wrapping_sub(ONES * 0x20) & !x);
        let hit = hit & HIGH;
        if x & HIGH != 0 && first_high.is_none() {
            // The bytes before the run's end (the lowest flag) are the string's.
            let before = if hit != 0 {
                (1u64 << (hit.trailing_zeros() / 8 * 8)) - 1
            } else {
                u64::MAX
            };
            let high = x & HIGH & before;
            if high != 0 {
                first_high = Some(i + (high.trailing_zeros() / 8) as usize);
            }
        }
        if hit != 0 {
            return (i + (hit.trailing_zeros() / 8) as usize, first_high);
        }
        i += 8;
    }
    while let Some(&c) = s.get(i) {
        if c == b'"' || c == b'\\' || c < 0x20 {
            break;
        }
        if c >= 0x80 && first_high.is_none() {
            first_high = Some(i);
        }
        i += 1;
    }
    (i, first_high)
}

/// A position in a line of JSON text. Every method that reads a value expects the cursor on
/// the value's first byte (whitespace already skipped) and leaves it just after the value.
pub(crate) struct Cursor<'a> {
    text: &'a [u8],
    at: usize,
    depth: u32,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `text`, which need not be UTF-8: outside strings only ASCII is
    /// JSON, and each string with a non-ASCII byte is checked.
    pub(crate) fn new(text: &'a [u8]) -> Cursor<'a> {
        Cursor {
            text,
            at: 0,
            depth: 0,
        }
    }

    fn bytes(&self) -> &'a [u8] {
        self.text
    }

    /// Skips JSON whitespace (space, tab, newline, carriage return).
    pub(crate) fn ws(&mut self) {
        let b = self.bytes();
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = b.get(self.at) {
            self.at += 1;
        }
    }

    pub(crate) fn peek(&self) -> Option<u8> {
        self.bytes().get(self.at).copied()
    }

    /// Whether only whitespace remains.
    pub(crate) fn at_end(&mut self) -> bool {
        self.ws();
        self.at == self.text.len()
    }

    /// Reads a string literal (the cursor is on its opening quote).
    pub(crate) fn string(&mut self) -> Scan<Literal<'a>> {
        let b = self.bytes();
        if b.get(self.at) != Some(&b'"') {
            return Err(Declined);
        }
        let start = self.at + 1;
        let mut i = start;
        let mut lit = Literal {
            quoted: "",
            escaped: false,
            first_non_ascii: None,
            decoded_fewer: 0,
            stringified_fewer: 0,
        };
        loop {
            let (run, high) = plain_run(&b[i..]);
            if lit.first_non_ascii.is_none() {
                lit.first_non_ascii = high.map(|h| i + h - start);
            }
            i += run;
            match b.get(i) {
                Some(b'"') => break,
                Some(b'\\') => {
                    lit.escaped = true;
                    i = escape(b, i, &mut lit)?;
                }
                // A control character, or the end of the line inside the string.
                _ => return Err(Declined),
            }
        }
        let quoted = &b[start - 1..=i];
        if let Some(at) = lit.first_non_ascii {
            // The bytes before `at` are ASCII (escapes are too), so the check starts there.
            if std::str::from_utf8(&quoted[1 + at..]).is_err() {
                return Err(Declined);
            }
        }
        // SAFETY: the bytes before `first_non_ascii` (all of them when it is `None`) are ASCII,
        // and the rest passed `from_utf8` just above, so `quoted` is UTF-8.
        lit.quoted = unsafe { std::str::from_utf8_unchecked(quoted) };
        self.at = i + 1;
        Ok(lit)
    }

    /// Reads a string, or skips any other value (`None`).
    pub(crate) fn string_or_skip(&mut self) -> Scan<Option<Literal<'a>>> {
        if self.peek() == Some(b'"') {
            self.string().map(Some)
        } else {
            self.skip().map(|()| None)
        }
    }

    /// Reads a number's text (validated against JSON's grammar).
    pub(crate) fn number(&mut self) -> Scan<&'a str> {
        let b = self.bytes();
        let start = self.at;
        let mut i = start;
        let digits = |mut i: usize| {
            while b.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            i
        };
        if b.get(i) == Some(&b'-') {
            i += 1;
        }
        match b.get(i) {
            Some(b'0') => i += 1,
            Some(b'1'..=b'9') => i = digits(i + 1),
            _ => return Err(Declined),
        }
        if b.get(i) == Some(&b'.') {
            let end = digits(i + 1);
            if end == i + 1 {
                return Err(Declined);
            }
            i = end;
        }
        if let Some(b'e' | b'E') = b.get(i) {
            i += 1;
            if let Some(b'+' | b'-') = b.get(i) {
                i += 1;
            }
            let end = digits(i);
            if end == i {
                return Err(Declined);
            }
            i = end;
        }
        self.at = i;
        // SAFETY: every byte in `start..i` was matched above as an ASCII digit, sign, `.`, `e`
        // or `E`.
        Ok(unsafe { std::str::from_utf8_unchecked(&b[start..i]) })
    }

    fn literal(&mut self, word: &str) -> Scan<()> {
        if self.text[self.at..].starts_with(word.as_bytes()) {
            self.at += word.len();
            Ok(())
        } else {
            Err(Declined)
        }
    }

    /// Skips one value of any kind, validating it.
    pub(crate) fn skip(&mut self) -> Scan<()> {
        match self.peek() {
            Some(b'"') => self.string().map(drop),
            Some(b'{') => self.object(|c, _| c.skip()),
            Some(b'[') => self.array(Cursor::skip),
            Some(b't') => self.literal("true"),
            Some(b'f') => self.literal("false"),
            Some(b'n') => self.literal("null"),
            Some(b'-' | b'0'..=b'9') => self.number().map(drop),
            _ => Err(Declined),
        }
    }

    /// Steps into a container at `open`; `true` when it closes at once (it is empty, and the
    /// cursor is past it).
    fn enter(&mut self, open: u8, close: u8) -> Scan<bool> {
        if self.peek() != Some(open) || self.depth >= MAX_DEPTH {
            return Err(Declined);
        }
        self.at += 1;
        self.ws();
        if self.peek() == Some(close) {
            self.at += 1;
            return Ok(true);
        }
        self.depth += 1;
        Ok(false)
    }

    /// After a member or element: `,` (more follow, returns true) or `close` (false).
    fn next_or_close(&mut self, close: u8) -> Scan<bool> {
        self.ws();
        match self.peek() {
            Some(b',') => {
                self.at += 1;
                self.ws();
                Ok(true)
            }
            Some(c) if c == close => {
                self.at += 1;
                self.depth -= 1;
                Ok(false)
            }
            _ => Err(Declined),
        }
    }

    /// Reads an object (the cursor is on `{`), calling `member` with each key and the cursor
    /// on its value, which `member` must read or skip.
    pub(crate) fn object(
        &mut self,
        mut member: impl FnMut(&mut Self, Literal<'a>) -> Scan<()>,
    ) -> Scan<()> {
        if self.enter(b'{', b'}')? {
            return Ok(());
        }
        loop {
            let key = self.string()?;
            self.ws();
            if self.peek() != Some(b':') {
                return Err(Declined);
            }
            self.at += 1;
            self.ws();
            member(self, key)?;
            if !self.next_or_close(b'}')? {
                return Ok(());
            }
        }
    }

    /// Reads an array (the cursor is on `[`), calling `element` with the cursor on each
    /// element, which `element` must read or skip.
    pub(crate) fn array(&mut self, mut element: impl FnMut(&mut Self) -> Scan<()>) -> Scan<()> {
        if self.enter(b'[', b']')? {
            return Ok(());
        }
        loop {
            element(self)?;
            if !self.next_or_close(b']')? {
                return Ok(());
            }
        }
    }
}

/// Reads the escape at `b[i]` (a backslash), adds what it shortens to `lit`, and returns where
/// it ends. A `\\u` escape of a surrogate must be a high surrogate followed by an escaped low
/// one; lone surrogates are declined (the general path carries them, see
/// [`crate::json::parse_line`]).
fn escape(b: &[u8], i: usize, lit: &mut Literal) -> Scan<usize> {
    match b.get(i + 1) {
        Some(b'"' | b'\\' | b'b' | b'f' | b'n' | b'r' | b't') => {
            // One character in two bytes, which `JSON.stringify` writes the same way.
            lit.decoded_fewer += 1;
            Ok(i + 2)
        }
        Some(b'/') => {
            // `JSON.stringify` writes a plain `/`.
            lit.decoded_fewer += 1;
            lit.stringified_fewer += 1;
            Ok(i + 2)
        }
        Some(b'u') => {
            let unit = hex4(b, i + 2).ok_or(Declined)?;
            lit.decoded_fewer += 5;
            lit.stringified_fewer += match unit {
                // `"`, `\\` and the controls with a short escape: two units.
                0x22 | 0x5c | 0x08 | 0x09 | 0x0a | 0x0c | 0x0d => 4,
                // Other controls: `\\u00XX` again.
                0..=0x1f => 0,
                _ => 5,
            };
            match unit {
                0xD800..=0xDBFF => {
                    if b.get(i + 6..i + 8) != Some(b"\\u") {
                        return Err(Declined);
                    }
                    match hex4(b, i + 8) {
                        Some(0xDC00..=0xDFFF) => {
                            // The low half: one more unit in six bytes.
                            lit.decoded_fewer += 5;
                            lit.stringified_fewer += 5;
                            Ok(i + 12)
                        }
                        _ => Err(Declined),
                    }
                }
                0xDC00..=0xDFFF => Err(Declined),
                _ => Ok(i + 6),
            }
        }
        _ => Err(Declined),
    }
}

/// UTF-16 units of a literal's bytes taken as they are: one per scalar's leading byte, two for
/// 4-byte sequences (surrogate pairs in UTF-16). Escapes count by their written bytes; the
/// cursor subtracts what they shorten (see [`Literal`]).
fn written_units(inner: &[u8]) -> u64 {
    if inner.is_ascii() {
        return inner.len() as u64;
    }
    inner
        .iter()
        .map(|&b| u64::from((b & 0xC0) != 0x80) + u64::from(b >= 0xF0))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skips(text: &str) -> bool {
        let mut c = Cursor::new(text.as_bytes());
        c.ws();
        c.skip().is_ok() && c.at_end()
    }

    #[test]
    fn accepts_json_and_declines_what_is_not() {
        for ok in [
            r#"{"a":[1,-0,0.5,1e3,2E-7,true,false,null,"x\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00"]}"#,
            " [ ] ",
            "{ }",
            "\"é😀\"",
            "-12.5e+3",
        ] {
            assert!(skips(ok), "{ok}");
            assert!(
                serde_json::from_str::<serde_json::Value>(ok).is_ok(),
                "{ok}"
            );
        }
        for bad in [
            "",
            "{",
            "[1,]",
            "{\"a\":1,}",
            "{\"a\" 1}",
            "01",
            "1.",
            "1e",
            "-",
            "+1",
            ".5",
            "tru",
            "nul",
            "\"a",
            "\"\u{1}\"",
            "\"\\x\"",
            "\"\\u12g4\"",
            "[1 2]",
            "{\"a\":1}x",
            "{1:2}",
            "NaN",
        ] {
            assert!(!skips(bad), "{bad:?}");
        }
        // Valid JSON the general path reads instead: lone surrogates, deep nesting.
        for declined in [r#""\ud83d""#, r#""\ude00x""#, r#""\ud83d\u0041""#] {
            assert!(!skips(declined), "{declined}");
        }
        let deep = format!("{}{}", "[".repeat(101), "]".repeat(101));
        assert!(!skips(&deep));
        let fine = format!("{}{}", "[".repeat(100), "]".repeat(100));
        assert!(skips(&fine));
    }

    #[test]
    fn the_plain_run_stops_at_the_first_quote_backslash_or_control_character() {
        for (s, want) in [
            ("", 0),
            ("abc", 3),
            ("abcdefghijk\"", 11),
            ("abcdefgh\\", 8),
            ("a\u{1f}", 1),
            ("ééééé\"", 10),
            (
                "\u{7f}\u{7f}\u{7f}\u{7f}\u{7f}\u{7f}\u{7f}\u{7f}\u{7f}\n",
                9,
            ),
            ("12345678901234567890\t", 20),
        ] {
            assert_eq!(plain_run(s.as_bytes()).0, want, "{s:?}");
            assert_eq!(plain_run_swar(s.as_bytes(), 0, None).0, want, "{s:?}");
        }
    }

    /// Every width of the scan (SSE2 on x86-64, eight bytes, one byte) agrees
    /// with a byte-by-byte reading, on strings of every length up to a few blocks of each,
    /// with the stopping byte and a non-ASCII byte anywhere.
    #[test]
    fn every_width_of_the_plain_run_agrees_with_a_byte_by_byte_reading() {
        let reference = |s: &[u8]| {
            let end = s
                .iter()
                .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
                .unwrap_or(s.len());
            (end, s[..end].iter().position(|&c| c >= 0x80))
        };
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for len in 0..200 {
            for _ in 0..40 {
                let mut s: Vec<u8> = (0..len).map(|_| b'a' + (next() % 26) as u8).collect();
                // Sometimes a stopping byte, sometimes a non-ASCII one, each anywhere.
                for (odds, byte) in [(2, [b'"', b'\\', b'\n'][next() as usize % 3]), (2, 0xc3)] {
                    if len > 0 && next() % odds == 0 {
                        let at = next() as usize % len;
                        s[at] = byte;
                    }
                }
                let want = reference(&s);
                assert_eq!(plain_run(&s), want, "{s:?}");
                assert_eq!(plain_run_swar(&s, 0, None), want, "{s:?}");
                #[cfg(target_arch = "x86_64")]
                {
                    assert_eq!(plain_run_sse2(&s), want, "{s:?}");
                }
            }
        }
    }

    /// The first non-ASCII byte is found wherever it stands in a chunk, and a non-ASCII byte
    /// after the run's end (outside the string) is not reported.
    #[test]
    fn the_plain_run_reports_its_first_non_ascii_byte_and_none_past_its_end() {
        for len in 0..40 {
            for at in 0..len {
                let mut s = "a".repeat(len).into_bytes();
                s[at] = 0xc3;
                s.insert(at + 1, 0xa9);
                s.push(b'"');
                s.extend("é".repeat(20).as_bytes());
                let run = s.iter().position(|&b| b == b'"').unwrap();
                assert_eq!(plain_run(&s), (run, Some(at)), "{len} {at}");
                assert_eq!(plain_run_swar(&s, 0, None), (run, Some(at)), "{len} {at}");
            }
            let mut s = "a".repeat(len).into_bytes();
            s.push(b'\\');
            s.extend("é".repeat(20).as_bytes());
            assert_eq!(plain_run(&s), (len, None), "{len}");
            assert_eq!(plain_run_swar(&s, 0, None), (len, None), "{len}");
        }
    }

    #[test]
    fn literals_decode_and_compare_through_their_escapes() {
        let mut c = Cursor::new(br#""p\u0061th\n\ud83d\ude00\/""#);
        let lit = c.string().unwrap();
        assert!(lit.escaped);
        assert_eq!(lit.decoded(), "path\n😀/");
        let mut c = Cursor::new(br#""\u0070ath""#);
        assert!(c.string().unwrap().is("path"));
    }
}
