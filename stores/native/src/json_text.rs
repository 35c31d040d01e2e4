//! JSON text as the Python side writes it: floats as Python's `repr` (what `json.dumps`
//! writes) and as orjson writes them, strings escaped as both escape them, and
//! `json.dumps(value, ensure_ascii=False)` of a decoded JSON value (the rendering of an
//! offending input in a rejection's detail, `agents.events.shown`).
//!
//! A float's digits are the shortest that round-trip (`ryu`; CPython's `repr` and orjson pick
//! the same ones); only the layout differs: Python writes `1e-05` and `1e+16`, orjson
//! `0.00001` and `1e+16`, and both `2.0` for an integral float.

use serde_json::Value;

/// Longest rendering of an offending input value in a detail (`agents.events.SHOWN_CHARS`).
pub const SHOWN_CHARS: usize = 80;

/// The decimal digits of a finite float: `neg`, the significant digits (no leading or
/// trailing zeros; empty for zero) and the exponent `x` of `d.ddd × 10^x`.
fn decimal(f: f64) -> (bool, Vec<u8>, i32) {
    let mut buf = ryu::Buffer::new();
    let text = buf.format_finite(f).as_bytes();
    let neg = text.first() == Some(&b'-');
    let text = if neg { &text[1..] } else { text };
    let (mantissa, exp) = match text.iter().position(|&c| c == b'e' || c == b'E') {
        Some(i) => {
            let e = std::str::from_utf8(&text[i + 1..])
                .ok()
                .and_then(|s| s.parse::<i32>().ok())
                .unwrap_or(0);
            (&text[..i], e)
        }
        None => (text, 0),
    };
    let (int_part, frac_part) = match mantissa.iter().position(|&c| c == b'.') {
        Some(i) => (&mantissa[..i], &mantissa[i + 1..]),
        None => (mantissa, &mantissa[mantissa.len()..]),
    };
    let mut all: Vec<u8> = int_part.iter().chain(frac_part).copied().collect();
    // value = all × 10^(exp - len(frac))
    let mut scale = exp - frac_part.len() as i32;
    while all.last() == Some(&b'0') {
        all.pop();
        scale += 1;
    }
    let lead = all.iter().take_while(|&&c| c == b'0').count();
    let digits = all.split_off(lead);
    if digits.is_empty() {
        return (neg, digits, 0);
    }
    let x = scale + digits.len() as i32 - 1;
    (neg, digits, x)
}

/// `d.ddd × 10^x` in fixed notation with at least one digit after the point.
fn push_fixed(out: &mut Vec<u8>, digits: &[u8], x: i32) {
    if x >= 0 {
        let whole = x as usize + 1;
        if digits.len() <= whole {
            out.extend_from_slice(digits);
            out.resize(out.len() + whole - digits.len(), b'0');
            out.extend_from_slice(b".0");
        } else {
            out.extend_from_slice(&digits[..whole]);
            out.push(b'.');
            out.extend_from_slice(&digits[whole..]);
        }
    } else {
        out.extend_from_slice(b"0.");
        out.resize(out.len() + (-x - 1) as usize, b'0');
        out.extend_from_slice(digits);
    }
}

fn push_float(out: &mut Vec<u8>, f: f64, lowest_fixed: i32, exp_width: usize) {
    let (neg, digits, x) = decimal(f);
    if neg {
        out.push(b'-');
    }
    if digits.is_empty() {
        out.extend_from_slice(b"0.0");
    } else if (lowest_fixed..16).contains(&x) {
        push_fixed(out, &digits, x);
    } else {
        out.push(digits[0]);
        if digits.len() > 1 {
            out.push(b'.');
            out.extend_from_slice(&digits[1..]);
        }
        out.push(b'e');
        out.push(if x < 0 { b'-' } else { b'+' });
        let mut num = itoa::Buffer::new();
        let text = num.format(x.unsigned_abs()).as_bytes();
        out.resize(out.len() + exp_width.saturating_sub(text.len()), b'0');
        out.extend_from_slice(text);
    }
}

/// A finite float as Python's `repr` writes it (and so `json.dumps`): fixed notation for
/// exponents -4 to 15, else `d.ddde±XX` with at least two exponent digits.
pub fn push_py_float(out: &mut Vec<u8>, f: f64) {
    push_float(out, f, -4, 2);
}

/// A finite float as orjson writes it: fixed notation for exponents -5 to 15, else
/// `d.ddde±X` with no padding of the exponent. That is `ryu`'s own layout but for the `+` of
/// a positive exponent, so it is written straight from `ryu`'s text (no allocation).
pub fn push_orjson_float(out: &mut Vec<u8>, f: f64) {
    let mut buf = ryu::Buffer::new();
    let text = buf.format_finite(f).as_bytes();
    match text.iter().position(|&c| c == b'e') {
        Some(i) if text.get(i + 1) != Some(&b'-') => {
            out.extend_from_slice(&text[..=i]);
            out.push(b'+');
            out.extend_from_slice(&text[i + 1..]);
        }
        _ => out.extend_from_slice(text),
    }
}

/// `push_orjson_float` by the layout rule rather than from `ryu`'s text (the tests check
/// that the two agree).
#[cfg(test)]
fn orjson_float_by_rule(out: &mut Vec<u8>, f: f64) {
    push_float(out, f, -5, 1);
}

/// `s` as a JSON string, escaped as `json.dumps(ensure_ascii=False)` and orjson both escape:
/// `"`, `\`, `\b \t \n \f \r` and every other control character as `\u00xx`.
pub fn push_str(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &c) in bytes.iter().enumerate() {
        let short = match c {
            b'"' => b'"',
            b'\\' => b'\\',
            0x08 => b'b',
            b'\t' => b't',
            b'\n' => b'n',
            0x0c => b'f',
            b'\r' => b'r',
            0..=0x1f => b'u',
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        out.push(b'\\');
        out.push(short);
        if short == b'u' {
            out.extend_from_slice(b"00");
            out.push(HEX[(c >> 4) as usize]);
            out.push(HEX[(c & 15) as usize]);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// `json.dumps(value, ensure_ascii=False)` of a decoded value (separators `", "` and
/// `": "`; objects in their keys' order, each key once).
pub fn push_py_json(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                out.extend_from_slice(itoa::Buffer::new().format(i).as_bytes());
            } else if let Some(u) = n.as_u64() {
                out.extend_from_slice(itoa::Buffer::new().format(u).as_bytes());
            } else {
                push_py_float(out, n.as_f64().unwrap_or(f64::NAN));
            }
        }
        Value::String(s) => push_str(out, s),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.extend_from_slice(b", ");
                }
                push_py_json(out, item);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            out.push(b'{');
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.extend_from_slice(b", ");
                }
                push_str(out, k);
                out.extend_from_slice(b": ");
                push_py_json(out, v);
            }
            out.push(b'}');
        }
    }
}

/// `agents.events.shown(value)`: its `json.dumps` text, cut to `SHOWN_CHARS` characters
/// (the last three of them `...`) when longer.
pub fn shown(value: &Value) -> String {
    let mut out = Vec::new();
    push_py_json(&mut out, value);
    let text = String::from_utf8(out).expect("JSON text of valid strings is UTF-8");
    cut(text)
}

fn cut(text: String) -> String {
    match text.char_indices().nth(SHOWN_CHARS) {
        None => text,
        Some(_) => {
            let end = text
                .char_indices()
                .nth(SHOWN_CHARS - 3)
                .map_or(text.len(), |(i, _)| i);
            format!("{}...", &text[..end])
        }
    }
}

/// Python's `repr` of a finite float, as a `String`.
pub fn py_float(f: f64) -> String {
    let mut out = Vec::new();
    push_py_float(&mut out, f);
    String::from_utf8(out).expect("ASCII")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn orjson(f: f64) -> String {
        let mut out = Vec::new();
        push_orjson_float(&mut out, f);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn floats_as_python_and_orjson_write_them() {
        let cases: &[(f64, &str, &str)] = &[
            (1e16, "1e+16", "1e+16"),
            (1e-7, "1e-07", "1e-7"),
            (1e-5, "1e-05", "0.00001"),
            (1.5e-5, "1.5e-05", "0.000015"),
            (1e-4, "0.0001", "0.0001"),
            (0.1, "0.1", "0.1"),
            (5e-324, "5e-324", "5e-324"),
            (
                1.7976931348623157e308,
                "1.7976931348623157e+308",
                "1.7976931348623157e+308",
            ),
            (-0.0, "-0.0", "-0.0"),
            (0.0, "0.0", "0.0"),
            (2.0, "2.0", "2.0"),
            (1e15, "1000000000000000.0", "1000000000000000.0"),
            (123.45, "123.45", "123.45"),
            (-1.2345e-12, "-1.2345e-12", "-1.2345e-12"),
            (
                1.2345678901234568e17,
                "1.2345678901234568e+17",
                "1.2345678901234568e+17",
            ),
        ];
        for &(f, python, orj) in cases {
            assert_eq!(py_float(f), python, "repr of {f:e}");
            assert_eq!(orjson(f), orj, "orjson of {f:e}");
        }
    }

    #[test]
    fn orjson_floats_are_ryus_layout_with_a_plus() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for i in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let f = f64::from_bits(x);
            let f = if f.is_finite() { f } else { i as f64 * 0.1 };
            let (mut a, mut b) = (Vec::new(), Vec::new());
            push_orjson_float(&mut a, f);
            orjson_float_by_rule(&mut b, f);
            assert_eq!(a, b, "{f:e}");
        }
        for e in -330..310 {
            for m in [1.0, 1.5, 9.999_999_999_999_999] {
                let f = m * 10f64.powi(e);
                let (mut a, mut b) = (Vec::new(), Vec::new());
                push_orjson_float(&mut a, f);
                orjson_float_by_rule(&mut b, f);
                assert_eq!(a, b, "{f:e}");
            }
        }
    }

    #[test]
    fn json_dumps_of_values_and_the_cut() {
        let v: Value =
            serde_json::from_str(r#"{"a": [1, -2.5, true, null, "x\"\n\u0001é"], "a": {}}"#)
                .unwrap();
        assert_eq!(shown(&v), r#"{"a": {}}"#);
        let v: Value =
            serde_json::from_str(r#"[1, -2.5, true, null, "x\"\n\u0001é", {}]"#).unwrap();
        assert_eq!(shown(&v), r#"[1, -2.5, true, null, "x\"\n\u0001é", {}]"#);
        let long = Value::String("é".repeat(100));
        let text = shown(&long);
        assert_eq!(text.chars().count(), SHOWN_CHARS);
        assert!(text.starts_with("\"é") && text.ends_with("é..."));
    }
}
