//! Input records -> events with `agents.events.EventParser.parse`'s rules, reason codes and
//! detail strings (docs/reference/records.md), without Python.
//!
//! A record whose outcome this module cannot decide exactly as Python does is handed back as
//! [`Outcome::Python`] (the caller parses it with the Python parser): bytes that Python reads
//! as another encoding than UTF-8 (a BOM, UTF-16/32) or as UTF-8 with surrogates, JSON that
//! serde_json refuses (the detail carries Python's message, which names where the JSON
//! breaks; NaN and infinities, numbers beyond a double), numbers whose value serde_json reads
//! otherwise than Python (19 or more digits in a row, `-0`), integral float times beyond
//! 64 bits, and time strings that are neither epoch ms nor the common ISO-8601 forms
//! `YYYY-MM-DD[(T| )HH:MM:SS[.f{1,6}][Z|±HH:MM]]` (Python's `fromisoformat` accepts more).

use crate::json_text::{py_float, shown};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use std::fmt;

pub const MALFORMED_JSON: &str = "malformed_json";
pub const MISSING_FIELD: &str = "missing_field";
pub const BAD_KEY: &str = "bad_key";
pub const EMPTY_KEY: &str = "empty_key";
pub const BAD_TIMESTAMP: &str = "bad_timestamp";
pub const BAD_VALUE: &str = "bad_value";
pub const OVERSIZE: &str = "oversize";

/// An event's key: the Kafka key's text, or the key field's.
pub enum Key<'a> {
    Kafka(&'a str),
    Field(String),
}

impl Key<'_> {
    pub fn as_str(&self) -> &str {
        match self {
            Key::Kafka(s) => s,
            Key::Field(s) => s,
        }
    }
}

/// What one record is: an event, a rejection (reason code and detail), or for Python to say.
pub enum Outcome<'a> {
    Event {
        key: Key<'a>,
        ts: i64,
        value: Value,
    },
    Bad {
        reason: &'static str,
        detail: String,
    },
    Python,
}

fn bad(reason: &'static str, detail: String) -> Outcome<'static> {
    Outcome::Bad { reason, detail }
}

/// The parsing rules of one `WorkerSettings` (what `EventParser.__init__` reads), with the
/// details that name the configured fields (`shown(field)`, rendered by Python).
pub struct Rules {
    pub key_field: Option<String>,
    pub ts_field: String,
    pub value_field: String,
    pub kafka_time: bool,
    pub max_key: usize,
    pub max_value: usize,
    pub min_time: i64,
    pub max_time: i64,
    /// `no {shown(key_field)} field`, `no {shown(ts_field)} field`, `no {shown(value_field)}
    /// field`, `the {shown(key_field)} field is empty`.
    pub no_key_field: String,
    pub no_ts_field: String,
    pub no_value_field: String,
    pub empty_key_field: String,
}

const KEY: u8 = 1;
const TS: u8 = 2;
const VALUE: u8 = 4;

/// The top-level JSON value as far as the rules need it: the three fields of an object (the
/// last of duplicates, as in a Python dict), or the JSON type of anything else.
enum Top {
    Object([Option<Value>; 3]),
    Other(&'static str),
}

struct TopSeed<'r>(&'r Rules);

impl<'de> DeserializeSeed<'de> for TopSeed<'_> {
    type Value = Top;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Top, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for TopSeed<'_> {
    type Value = Top;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Top, E> {
        Ok(Top::Other("a boolean"))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Top, E> {
        Ok(Top::Other("a number"))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Top, E> {
        Ok(Top::Other("a number"))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Top, E> {
        Ok(Top::Other("a number"))
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Top, E> {
        Ok(Top::Other("a string"))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Top, E> {
        Ok(Top::Other("null"))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Top, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Top::Other("an array"))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Top, A::Error> {
        let mut fields: [Option<Value>; 3] = [None, None, None];
        while let Some(which) = map.next_key_seed(FieldSeed(self.0))? {
            if which == 0 {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            let v: Value = map.next_value()?;
            for (slot, bit) in [KEY, TS, VALUE].iter().enumerate() {
                if which & bit != 0 {
                    fields[slot] = Some(v.clone());
                }
            }
        }
        Ok(Top::Object(fields))
    }
}

/// Which of the rules' fields an object key names (a bit set).
struct FieldSeed<'r>(&'r Rules);

impl<'de> DeserializeSeed<'de> for FieldSeed<'_> {
    type Value = u8;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<u8, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for FieldSeed<'_> {
    type Value = u8;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object key")
    }
    fn visit_str<E: de::Error>(self, k: &str) -> Result<u8, E> {
        let r = self.0;
        let mut which = 0;
        if r.key_field.as_deref() == Some(k) {
            which |= KEY;
        }
        if r.ts_field == k {
            which |= TS;
        }
        if r.value_field == k {
            which |= VALUE;
        }
        Ok(which)
    }
}

/// Whether Python's `json.detect_encoding` reads `b` as UTF-8 (no BOM, no zero byte among
/// the first two).
fn python_reads_utf8(b: &[u8]) -> bool {
    const BOMS: [&[u8]; 3] = [b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff"];
    if BOMS.iter().any(|bom| b.starts_with(bom)) {
        return false;
    }
    match b.len() {
        2 => b[0] != 0 && b[1] != 0,
        n if n >= 4 => b[0] != 0 && b[1] != 0,
        _ => true,
    }
}

/// Whether `b` holds a number serde_json may read otherwise than Python's `json`: 19 or more
/// digits in a row (an int beyond int64 becomes a float; a float's digits beyond a double's;
/// an int of more than 100 digits Python refuses) or the integer `-0` (a float -0.0 for
/// serde_json, the int 0 for Python). Strings may trip it too; they then take Python.
fn unsure_numbers(b: &[u8]) -> bool {
    let mut run = 0;
    for (i, &c) in b.iter().enumerate() {
        if c.is_ascii_digit() {
            run += 1;
            if run >= 19 {
                return true;
            }
            if c == b'0'
                && run == 1
                && i > 0
                && b[i - 1] == b'-'
                && !matches!(b.get(i + 1), Some(b'0'..=b'9' | b'.' | b'e' | b'E'))
            {
                return true;
            }
        } else {
            run = 0;
        }
    }
    false
}

/// Python's `str.isspace` (Unicode White_Space and the separators U+001C to U+001F).
fn py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn digits(b: &[u8]) -> Option<i64> {
    if b.is_empty() || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(b.iter().fold(0, |n, &c| n * 10 + i64::from(c - b'0')))
}

/// Epoch ms of the common ISO-8601 forms (see the module's note), as Python's
/// `fromisoformat` reads them (no offset: UTC; the fraction floored to ms), or None when
/// `s` is not one of them.
fn iso_ms(s: &[u8]) -> Option<i64> {
    if s.len() < 10 || s[4] != b'-' || s[7] != b'-' {
        return None;
    }
    let (y, m, d) = (digits(&s[..4])?, digits(&s[5..7])?, digits(&s[8..10])?);
    let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    let month_days = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if y < 1 || !(1..=12).contains(&m) || d < 1 || d > month_days[(m - 1) as usize] {
        return None;
    }
    let mut ms = days_from_civil(y, m, d) * 86_400_000;
    if s.len() == 10 {
        return Some(ms);
    }
    if s.len() < 19 || !matches!(s[10], b'T' | b' ') || s[13] != b':' || s[16] != b':' {
        return None;
    }
    let (h, mi, sec) = (
        digits(&s[11..13])?,
        digits(&s[14..16])?,
        digits(&s[17..19])?,
    );
    if h > 23 || mi > 59 || sec > 59 {
        return None;
    }
    ms += h * 3_600_000 + mi * 60_000 + sec * 1000;
    let mut rest = &s[19..];
    if rest.first() == Some(&b'.') {
        let n = rest[1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if !(1..=6).contains(&n) {
            return None;
        }
        let micros = digits(&rest[1..=n])? * 10_i64.pow(6 - n as u32);
        ms += micros / 1000;
        rest = &rest[n + 1..];
    }
    match rest {
        [] | [b'Z'] => Some(ms),
        [sign @ (b'+' | b'-'), oh1, oh2, b':', om1, om2] => {
            let (oh, om) = (digits(&[*oh1, *oh2])?, digits(&[*om1, *om2])?);
            if oh > 23 || om > 59 {
                return None;
            }
            let offset = (oh * 60 + om) * 60_000;
            Some(if *sign == b'+' {
                ms - offset
            } else {
                ms + offset
            })
        }
        _ => None,
    }
}

impl Rules {
    fn in_range(&self, ms: i128) -> Outcome<'static> {
        if (i128::from(self.min_time)..=i128::from(self.max_time)).contains(&ms) {
            Outcome::Event {
                key: Key::Field(String::new()),
                ts: ms as i64,
                value: Value::Null,
            }
        } else {
            bad(
                BAD_TIMESTAMP,
                format!("{ms} ms is outside the years 1-9999"),
            )
        }
    }

    /// `parse_event_time(raw)`: an event (key and value unset) with its time, or the outcome.
    fn event_time(&self, raw: &Value) -> Outcome<'static> {
        match raw {
            Value::Number(n) => {
                if let Some(i) = n.as_i64() {
                    self.in_range(i128::from(i))
                } else if let Some(u) = n.as_u64() {
                    self.in_range(i128::from(u))
                } else {
                    let f = n.as_f64().unwrap_or(f64::NAN);
                    if f.fract() != 0.0 || !f.is_finite() {
                        bad(
                            BAD_TIMESTAMP,
                            format!("not a whole number of ms: {}", py_float(f)),
                        )
                    } else if f.abs() < 9.2e18 {
                        self.in_range(f as i128)
                    } else {
                        Outcome::Python // its detail names int(f), of up to 309 digits
                    }
                }
            }
            Value::String(s) => {
                let text = s.trim_matches(py_space).as_bytes();
                let sign = usize::from(text.first() == Some(&b'-'));
                let body = &text[sign..];
                if (1..=20).contains(&body.len()) && body.iter().all(u8::is_ascii_digit) {
                    let n = body
                        .iter()
                        .fold(0_i128, |n, &c| n * 10 + i128::from(c - b'0'));
                    return self.in_range(if sign == 1 { -n } else { n });
                }
                match iso_ms(text) {
                    Some(ms) => self.in_range(i128::from(ms)),
                    None => Outcome::Python,
                }
            }
            _ => bad(BAD_TIMESTAMP, format!("not a time: {}", shown(raw))),
        }
    }

    /// `check_value(raw)`.
    fn check_value(raw: Value) -> Result<Value, Outcome<'static>> {
        match raw {
            Value::Number(_) | Value::Object(_) => Ok(raw),
            Value::Bool(_) | Value::Null => {
                Err(bad(BAD_VALUE, format!("not a number: {}", shown(&raw))))
            }
            _ => Err(bad(
                BAD_VALUE,
                format!("not a number or an object: {}", shown(&raw)),
            )),
        }
    }

    fn kafka_key<'a>(&self, key: Option<&'a [u8]>) -> Result<Key<'a>, Outcome<'static>> {
        let key = key.ok_or_else(|| bad(MISSING_FIELD, "record has no Kafka key".into()))?;
        if key.len() > self.max_key {
            return Err(bad(
                OVERSIZE,
                format!(
                    "key of {} bytes > max_key_bytes {}",
                    key.len(),
                    self.max_key
                ),
            ));
        }
        if key.is_empty() {
            return Err(bad(EMPTY_KEY, "the Kafka key is empty".into()));
        }
        std::str::from_utf8(key)
            .map(Key::Kafka)
            .map_err(|_| bad(BAD_KEY, "Kafka key is not UTF-8".into()))
    }

    fn field_key(&self, raw: Option<Value>) -> Result<Key<'static>, Outcome<'static>> {
        let raw = raw.ok_or_else(|| bad(MISSING_FIELD, self.no_key_field.clone()))?;
        let text = match &raw {
            Value::String(s) => s.clone(),
            Value::Number(n) if n.is_i64() || n.is_u64() => n.to_string(),
            _ => {
                return Err(bad(
                    BAD_KEY,
                    format!("key field is not a string: {}", shown(&raw)),
                ))
            }
        };
        if text.len() > self.max_key {
            return Err(bad(
                OVERSIZE,
                format!("key longer than max_key_bytes {}", self.max_key),
            ));
        }
        if text.is_empty() {
            return Err(bad(EMPTY_KEY, self.empty_key_field.clone()));
        }
        Ok(Key::Field(text))
    }

    /// The outcome of `EventParser.parse(key, value, kafka_ts)`. O(size of the record).
    pub fn parse<'a>(
        &self,
        key: Option<&'a [u8]>,
        value: Option<&[u8]>,
        kafka_ts: Option<i64>,
    ) -> Outcome<'a> {
        let Some(value) = value else {
            return bad(MALFORMED_JSON, "empty value (tombstone)".into());
        };
        if value.len() > self.max_value {
            return bad(
                OVERSIZE,
                format!(
                    "value of {} bytes > max_value_bytes {}",
                    value.len(),
                    self.max_value
                ),
            );
        }
        if !python_reads_utf8(value) || std::str::from_utf8(value).is_err() || unsure_numbers(value)
        {
            return Outcome::Python;
        }
        let mut de = serde_json::Deserializer::from_slice(value);
        let top = match TopSeed(self).deserialize(&mut de).and_then(|top| {
            de.end()?;
            Ok(top)
        }) {
            Ok(top) => top,
            Err(_) => return Outcome::Python,
        };
        let [key_raw, ts_raw, value_raw] = match top {
            Top::Object(fields) => fields,
            Top::Other(kind) => {
                return bad(MALFORMED_JSON, format!("not a JSON object but {kind}"))
            }
        };
        let key = match &self.key_field {
            None => self.kafka_key(key),
            Some(_) => self.field_key(key_raw),
        };
        let key = match key {
            Ok(key) => key,
            Err(outcome) => return outcome,
        };
        let ts = if self.kafka_time {
            match kafka_ts {
                Some(ts) if ts >= 0 => self.in_range(i128::from(ts)),
                _ => bad(BAD_TIMESTAMP, "record has no Kafka timestamp".into()),
            }
        } else {
            match &ts_raw {
                None => bad(MISSING_FIELD, self.no_ts_field.clone()),
                Some(raw) => self.event_time(raw),
            }
        };
        let ts = match ts {
            Outcome::Event { ts, .. } => ts,
            other => return other,
        };
        let Some(value_raw) = value_raw else {
            return bad(MISSING_FIELD, self.no_value_field.clone());
        };
        match Self::check_value(value_raw) {
            Ok(value) => Outcome::Event { key, ts, value },
            Err(outcome) => outcome,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(key_field: Option<&str>) -> Rules {
        Rules {
            key_field: key_field.map(String::from),
            ts_field: "ts".into(),
            value_field: "value".into(),
            kafka_time: false,
            max_key: 16,
            max_value: 1000,
            min_time: -62_135_596_800_000,
            max_time: 253_402_300_799_999,
            no_key_field: "no \"k\" field".into(),
            no_ts_field: "no \"ts\" field".into(),
            no_value_field: "no \"value\" field".into(),
            empty_key_field: "the \"k\" field is empty".into(),
        }
    }

    fn outcome(r: &Rules, key: &[u8], value: &str) -> String {
        match r.parse(Some(key), Some(value.as_bytes()), None) {
            Outcome::Event { key, ts, value } => format!("{} {ts} {value}", key.as_str()),
            Outcome::Bad { reason, detail } => format!("{reason}: {detail}"),
            Outcome::Python => "python".into(),
        }
    }

    #[test]
    fn the_rules_and_their_details() {
        let r = rules(None);
        assert_eq!(outcome(&r, b"k", r#"{"ts": 5, "value": 1.5}"#), "k 5 1.5");
        assert_eq!(
            outcome(&r, b"k", r#"{"ts":5,"value":{"a":1},"ts":7}"#),
            r#"k 7 {"a":1}"#
        );
        assert_eq!(
            outcome(&r, b"", r#"{"ts": 5, "value": 1}"#),
            "empty_key: the Kafka key is empty"
        );
        assert_eq!(
            outcome(&r, b"\xff", r#"{"ts": 5, "value": 1}"#),
            "bad_key: Kafka key is not UTF-8"
        );
        assert_eq!(
            outcome(&r, b"k", "[1, 2]"),
            "malformed_json: not a JSON object but an array"
        );
        assert_eq!(
            outcome(&r, b"k", r#"{"ts": 5.5, "value": 1}"#),
            "bad_timestamp: not a whole number of ms: 5.5"
        );
        assert_eq!(
            outcome(&r, b"k", r#"{"ts": true, "value": 1}"#),
            "bad_timestamp: not a time: true"
        );
        assert_eq!(
            outcome(&r, b"k", r#"{"ts": 1e300, "value": 1}"#),
            "python",
            "int(1e300) has 301 digits"
        );
        assert_eq!(
            outcome(&r, b"k", r#"{"ts": " 253402300800000 ", "value": 1}"#),
            "bad_timestamp: 253402300800000 ms is outside the years 1-9999"
        );
        assert_eq!(
            outcome(
                &r,
                b"k",
                r#"{"ts": "1970-01-01T00:00:01.5+00:01", "value": 1}"#
            ),
            "k -58500 1"
        );
        assert_eq!(
            outcome(&r, b"k", r#"{"ts": "0001-01-01", "value": 1}"#),
            "k -62135596800000 1"
        );
        assert_eq!(
            outcome(&r, b"k", r#"{"ts": "1 Jan 2024", "value": 1}"#),
            "python"
        );
        assert_eq!(
            outcome(&r, b"k", r#"{"ts": 1, "value": "3"}"#),
            r#"bad_value: not a number or an object: "3""#
        );
        assert_eq!(outcome(&r, b"k", r#"{"ts": 1, "value": -0}"#), "python");
        assert_eq!(outcome(&r, b"k", r#"{"ts": 1, "value": -0.0}"#), "k 1 -0.0");
        assert_eq!(outcome(&r, b"k", r#"{"ts": 1, "value": NaN}"#), "python");
        assert_eq!(
            outcome(&r, b"k", r#"{"ts": 1}"#),
            r#"missing_field: no "value" field"#
        );
        let r = rules(Some("k"));
        assert_eq!(
            outcome(&r, b"", r#"{"k": 12, "ts": 1, "value": 2}"#),
            "12 1 2"
        );
        assert_eq!(
            outcome(&r, b"", r#"{"k": "", "ts": 1, "value": 2}"#),
            r#"empty_key: the "k" field is empty"#
        );
        assert_eq!(
            outcome(&r, b"", r#"{"k": 1.0, "ts": 1, "value": 2}"#),
            "bad_key: key field is not a string: 1.0"
        );
    }
}
